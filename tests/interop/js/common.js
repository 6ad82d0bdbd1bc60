'use strict'
// Shared helpers for the kafkajs interop scripts.  Every script reads one JSON
// object on stdin and writes JSON lines on stdout; kafkajs's own log goes to
// stderr.  kafkajs is loaded from .cache/js (scripts/js-deps.sh) unless
// KAFKAJS_PATH points elsewhere.
const path = require('path')

const KAFKAJS = process.env.KAFKAJS_PATH ||
  path.resolve(__dirname, '..', '..', '..', '.cache', 'js', 'node_modules', 'kafkajs')
const kafkajs = require(KAFKAJS)
const { Kafka, logLevel } = kafkajs

function emit(obj) {
  process.stdout.write(JSON.stringify(obj) + '\n')
}

function stderrLogCreator() {
  return ({ namespace, level, label, log }) => {
    const { message, ...extra } = log
    process.stderr.write(`[kafkajs ${label} ${namespace}] ${message} ${JSON.stringify(extra)}\n`)
  }
}

// TLS when KAFKAJS_SSL_CA names a PEM file of CAs (and KAFKAJS_SSL_CERT / KAFKAJS_SSL_KEY a client certificate)
function sslOptions() {
  const fs = require('fs')
  if (!process.env.KAFKAJS_SSL_CA) return undefined
  const options = { ca: [fs.readFileSync(process.env.KAFKAJS_SSL_CA, 'utf8')] }
  if (process.env.KAFKAJS_SSL_CERT) {
    options.cert = fs.readFileSync(process.env.KAFKAJS_SSL_CERT, 'utf8')
    options.key = fs.readFileSync(process.env.KAFKAJS_SSL_KEY, 'utf8')
  }
  return options
}

// SASL when KAFKAJS_SASL_MECHANISM is set, as kafkajs spells it ('plain', 'scram-sha-256',
// 'scram-sha-512'), with KAFKAJS_SASL_USERNAME / KAFKAJS_SASL_PASSWORD; over TLS too with KAFKAJS_SSL_CA
function saslOptions() {
  const mechanism = process.env.KAFKAJS_SASL_MECHANISM
  if (!mechanism) return undefined
  return {
    mechanism,
    username: process.env.KAFKAJS_SASL_USERNAME || '',
    password: process.env.KAFKAJS_SASL_PASSWORD || '',
  }
}

function makeKafka(bootstrap, clientId) {
  const level = (process.env.KAFKAJS_LOG_LEVEL || 'WARN').toUpperCase()
  return new Kafka({
    clientId: clientId || 'klamm-interop',
    brokers: bootstrap.split(","),
    ssl: sslOptions(),
    sasl: saslOptions(),
    logLevel: logLevel[level] !== undefined ? logLevel[level] : logLevel.WARN,
    logCreator: stderrLogCreator,
  })
}

function readInput() {
  return new Promise((resolve, reject) => {
    const chunks = []
    process.stdin.on('data', c => chunks.push(c))
    process.stdin.on('end', () => {
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}'))
      } catch (e) {
        reject(e)
      }
    })
    process.stdin.on('error', reject)
  })
}

const enc = b => (b == null ? null : Buffer.from(b).toString('base64'))
const dec = s => (s == null ? null : Buffer.from(s, 'base64'))

// kafkajs header object -> [[name, base64|null], ...] (repeated names are arrays)
function encHeaders(headers) {
  const out = []
  for (const [k, v] of Object.entries(headers || {})) {
    for (const one of Array.isArray(v) ? v : [v]) out.push([k, enc(one)])
  }
  return out
}

// [[name, base64|null], ...] -> kafkajs header object
function decHeaders(list) {
  const out = {}
  for (const [k, v] of list || []) {
    const b = dec(v)
    if (Object.prototype.hasOwnProperty.call(out, k)) {
      out[k] = Array.isArray(out[k]) ? out[k].concat([b]) : [out[k], b]
    } else {
      out[k] = b
    }
  }
  return out
}

function errorInfo(e) {
  if (!e) return null
  const info = { name: e.name, message: e.message }
  if (e.type) info.type = e.type
  if (e.code !== undefined) info.code = e.code
  if (e.retriable !== undefined) info.retriable = e.retriable
  if (e.cause) info.cause = errorInfo(e.cause)
  if (e.originalError) info.originalError = errorInfo(e.originalError)
  if (Array.isArray(e.groups)) info.groups = e.groups.map(g => ({ groupId: g.groupId, errorCode: g.errorCode, error: errorInfo(g.error) }))
  if (Array.isArray(e.errors)) info.errors = e.errors.map(errorInfo)
  return info
}

const sleep = ms => new Promise(r => setTimeout(r, ms))

async function waitFor(cond, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const v = await cond()
    if (v) return v
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await sleep(50)
  }
}

// process.exit() drops stdout still queued for a pipe: exit once it is flushed.
function exit(code) {
  process.stdout.write('', () => process.exit(code))
}

// Runs main(input); on failure prints {"error": ...} and exits 1.  `cleanup`
// entries (async functions) run in both cases, errors ignored.
function run(main) {
  const cleanup = []
  const guard = setTimeout(() => {
    emit({ error: { name: 'ScriptTimeout', message: 'script exceeded KLAMM_JS_TIMEOUT_MS' } })
    exit(3)
  }, Number(process.env.KLAMM_JS_TIMEOUT_MS || 100000))
  guard.unref()
  readInput()
    .then(input => main(input, cleanup))
    .then(async () => {
      for (const f of cleanup.reverse()) await f().catch(() => {})
      emit({ done: true })
      exit(0)
    })
    .catch(async e => {
      emit({ error: errorInfo(e), stack: e && e.stack })
      for (const f of cleanup.reverse()) await f().catch(() => {})
      exit(1)
    })
}

module.exports = {
  kafkajs, makeKafka, emit, enc, dec, encHeaders, decHeaders, errorInfo, sleep, waitFor, run,
}
