'use strict'
// Produce records with kafkajs (several send() calls, each with its own acks and
// compression), then read everything back with a kafkajs group consumer.
//
// stdin: {bootstrap, topic, partitions, create, group, records: [{k, v, h, p}],
//         sends: [{acks, compression: "none"|"gzip", from, to}], consumeTimeoutMs,
//         expect (records to consume, default all), settleMs (keep consuming after that)}
// stdout: {"created": bool} (when create)
//         {"sent": n, "acks", "compression", "metadata": [RecordMetadata]}
//         {"offsets": [{partition, offset, high, low}]}
//         {"rec": {p, o, k, v, h, ts}} for every consumed record (consumption order)
//         {"consumed": count, "assignment": {...}} then {"done": true}
const { kafkajs, makeKafka, emit, enc, dec, encHeaders, decHeaders, sleep, waitFor, run } = require('./common')
const { CompressionTypes, Partitioners } = kafkajs

const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP }

run(async (cfg, cleanup) => {
  const kafka = makeKafka(cfg.bootstrap, 'kafkajs-produce-consume')
  const admin = kafka.admin()
  await admin.connect()
  cleanup.push(() => admin.disconnect())
  if (cfg.create) {
    const created = await admin.createTopics({
      topics: [{ topic: cfg.topic, numPartitions: cfg.partitions }],
      waitForLeaders: true,
    })
    emit({ created })
  }

  const producer = kafka.producer({
    createPartitioner: Partitioners.DefaultPartitioner,
    allowAutoTopicCreation: !cfg.create,
  })
  await producer.connect()
  for (let n = 0; n < cfg.sends.length; n++) {
    const s = cfg.sends[n]
    const messages = cfg.records.slice(s.from, s.to).map(r => {
      const m = { key: dec(r.k), value: dec(r.v), headers: decHeaders(r.h) }
      if (r.p !== undefined && r.p !== null) m.partition = r.p
      return m
    })
    const metadata = await producer.send({
      topic: cfg.topic,
      acks: s.acks,
      compression: CODECS[s.compression],
      messages,
    })
    emit({ sent: n, acks: s.acks, compression: s.compression, metadata })
  }
  await producer.disconnect()

  emit({ offsets: await admin.fetchTopicOffsets(cfg.topic) })

  const total = cfg.expect === undefined ? cfg.records.length : cfg.expect
  const got = []
  let assignment = null
  const consumer = kafka.consumer({ groupId: cfg.group })
  consumer.on(consumer.events.GROUP_JOIN, e => { assignment = e.payload.memberAssignment })
  await consumer.connect()
  cleanup.push(() => consumer.disconnect())
  await consumer.subscribe({ topics: [cfg.topic], fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      got.push({
        p: partition,
        o: Number(message.offset),
        k: enc(message.key),
        v: enc(message.value),
        h: encHeaders(message.headers),
        ts: Number(message.timestamp),
      })
    },
  })
  await waitFor(() => got.length >= total, cfg.consumeTimeoutMs || 40000, `${total} records`)
  if (cfg.settleMs) await sleep(cfg.settleMs) // room for records that should not come
  await consumer.disconnect()
  for (const rec of got) emit({ rec })
  emit({ consumed: got.length, assignment })
})
