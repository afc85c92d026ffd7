#!/usr/bin/env node
// Rebuilds the settlement contract's artifacts (ABI + bytecode JSON under contracts/artifacts/)
// from contracts/solidity/ with the solc-js version pinned in package.json: every deployable
// contract of every source, so version 1, version 2 (GavelSettlementV2, LibList) and the test
// contracts under testing/ alike; abstract contracts (NodeRegistryV2) have no bytecode and no artifact.
//
//   npm ci                                      # installs the pinned solc (and anvil)
//   node scripts/build_contracts.mjs            # rewrites contracts/artifacts/*.json
//   node scripts/build_contracts.mjs --out DIR  # writes elsewhere (the drift test does this)
//
// The compiler settings below are part of the build: changing them changes the bytecode.
import { createHash } from 'node:crypto'
import * as fs from 'node:fs'
import { createRequire } from 'node:module'
import * as path from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const SOURCE_DIR = path.join(ROOT, 'contracts', 'solidity')
const DEFAULT_OUT = path.join(ROOT, 'contracts', 'artifacts')
const SETTINGS = {
  evmVersion: 'cancun',
  optimizer: { enabled: true, runs: 200 },
  metadata: { bytecodeHash: 'none' },
  outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object', 'evm.deployedBytecode.object'] } },
}

function listSources(dir, prefix = '') {
  const units = []
  for (const entry of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
    const unit = prefix + entry.name
    if (entry.isDirectory()) units.push(...listSources(path.join(dir, entry.name), unit + '/'))
    else if (entry.name.endsWith('.sol')) units.push(unit)
  }
  return units.sort()
}

// sha256 over (unit name, NUL, content, NUL) for every source in sorted order;
// contracts/artifacts.py computes the same digest.
function sourceHash(units, contents) {
  const hash = createHash('sha256')
  for (const unit of units) {
    hash.update(Buffer.from(unit, 'utf8'))
    hash.update(Buffer.from([0]))
    hash.update(contents[unit])
    hash.update(Buffer.from([0]))
  }
  return hash.digest('hex')
}

function main() {
  const args = process.argv.slice(2)
  const outIndex = args.indexOf('--out')
  const outDir = outIndex >= 0 ? path.resolve(args[outIndex + 1]) : DEFAULT_OUT
  const require = createRequire(path.join(ROOT, 'package.json'))
  const solc = require('solc')

  const units = listSources(SOURCE_DIR)
  const contents = Object.fromEntries(units.map((u) => [u, fs.readFileSync(path.join(SOURCE_DIR, u))]))
  const input = {
    language: 'Solidity',
    sources: Object.fromEntries(units.map((u) => [u, { content: contents[u].toString('utf8') }])),
    settings: SETTINGS,
  }
  const output = JSON.parse(solc.compile(JSON.stringify(input)))
  const problems = (output.errors || []).filter((e) => e.severity === 'error' || e.type === 'Warning')
  for (const p of problems) console.error(p.formattedMessage)
  if (problems.some((e) => e.severity === 'error')) process.exit(1)

  const digest = sourceHash(units, contents)
  fs.mkdirSync(outDir, { recursive: true })
  const written = []
  for (const unit of units) {
    for (const [name, compiled] of Object.entries(output.contracts[unit] || {})) {
      const bytecode = compiled.evm.bytecode.object
      if (!bytecode) continue // interfaces and abstract contracts
      const artifact = {
        contractName: name,
        sourceName: unit,
        compiler: { name: 'solc-js', version: solc.version() },
        settings: { evmVersion: SETTINGS.evmVersion, optimizer: SETTINGS.optimizer, metadata: SETTINGS.metadata },
        sourceHash: digest,
        abi: compiled.abi,
        bytecode: '0x' + bytecode,
        deployedBytecode: '0x' + compiled.evm.deployedBytecode.object,
      }
      const file = path.join(outDir, name + '.json')
      fs.writeFileSync(file, JSON.stringify(artifact, null, 2) + '\n')
      written.push(path.relative(ROOT, file))
    }
  }
  console.log(`solc ${solc.version()}: ${written.join(', ')}`)
}

main()
