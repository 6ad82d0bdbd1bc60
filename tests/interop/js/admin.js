'use strict'
// kafkajs admin client: describeCluster, createTopics, listTopics,
// fetchTopicMetadata, fetchTopicOffsets, describeConfigs, createPartitions, deleteTopics.
//
// stdin: {bootstrap, topics: [name3, name1], badTopic}
//   name3 is created with 3 partitions, name1 with 1 partition and a config entry;
//   5 records go to name3/0 and 2 to name3/2 before fetchTopicOffsets; name3 grows to
//   4 partitions; name1 is deleted.
// stdout: {"step": <name>, "result": ...} or {"step": <name>, "error": {...}} per step.
const { kafkajs, makeKafka, emit, errorInfo, sleep, run } = require('./common')
const { Partitioners } = kafkajs

run(async (cfg, cleanup) => {
  const kafka = makeKafka(cfg.bootstrap, 'kafkajs-admin')
  const admin = kafka.admin({ retry: { retries: 2 } })
  await admin.connect()
  cleanup.push(() => admin.disconnect())
  const [t3, t1] = cfg.topics

  const step = async (name, fn) => {
    try {
      const result = await fn()
      emit({ step: name, result: result === undefined ? null : result })
      return result
    } catch (e) {
      emit({ step: name, error: errorInfo(e) })
      return undefined
    }
  }

  await step('describeCluster', () => admin.describeCluster())
  await step('createTopics', () => admin.createTopics({
    waitForLeaders: true,
    topics: [
      { topic: t3, numPartitions: 3 },
      { topic: t1, numPartitions: 1, replicationFactor: 1,
        configEntries: [{ name: 'cleanup.policy', value: 'compact' }] },
    ],
  }))
  await step('createTopicsAgain', () => admin.createTopics({ topics: [{ topic: t3, numPartitions: 3 }] }))
  await step('createTopicsInvalid', () => admin.createTopics({ topics: [{ topic: cfg.badTopic, numPartitions: 1 }] }))
  await step('listTopics', () => admin.listTopics())
  await step('fetchTopicMetadata', () => admin.fetchTopicMetadata({ topics: [t3, t1] }))
  await step('fetchTopicOffsetsEmpty', () => admin.fetchTopicOffsets(t3))
  await step('describeConfigs', async () => {
    const r = await admin.describeConfigs({
      resources: [{ type: kafkajs.ConfigResourceTypes.TOPIC, name: t1, configNames: ['cleanup.policy'] }],
      includeSynonyms: false,
    })
    return r.resources.map(res => ({
      errorCode: res.errorCode,
      resourceName: res.resourceName,
      configEntries: res.configEntries.map(c => ({ name: c.configName, value: c.configValue })),
    }))
  })

  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false })
  await producer.connect()
  cleanup.push(() => producer.disconnect())
  const msgs = p => n => Array.from({ length: n }, (_, i) => ({ partition: p, key: `k${i}`, value: `v${i}` }))
  await producer.send({ topic: t3, messages: [...msgs(0)(5), ...msgs(2)(2)] })
  await producer.disconnect()
  await step('fetchTopicOffsets', () => admin.fetchTopicOffsets(t3))

  await step('createPartitions', () => admin.createPartitions({ topicPartitions: [{ topic: t3, count: 4 }] }))
  await step('fetchTopicOffsetsGrown', async () => {
    // the new partition may take a moment to appear in the metadata
    for (let i = 0; ; i++) {
      const r = await admin.fetchTopicOffsets(t3)
      if (r.length === 4 || i >= 40) return r
      await sleep(250)
    }
  })

  await step('deleteTopics', () => admin.deleteTopics({ topics: [t1], timeout: 10000 }))
  // the broker may take a moment to drop the topic from its metadata
  let listed
  for (let i = 0; i < 40; i++) {
    listed = await admin.listTopics()
    if (!listed.includes(t1)) break
    await sleep(250)
  }
  emit({ step: 'listTopicsAfterDelete', result: listed })
  // In a cluster each broker learns of the deletion on its own: ask until the one asked knows.
  await step('fetchTopicMetadataDeleted', async () => {
    let metadata
    for (let i = 0; i < 40; i++) {
      metadata = await admin.fetchTopicMetadata({ topics: [t1] })
      await sleep(250)
    }
    return metadata
  })
})
