"""Pure protocol logic: messages, identities, Merkle commitments, the dispute game. No I/O."""
