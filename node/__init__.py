"""The gavel peer: trio + libp2p host, roles, storage, CLI."""
