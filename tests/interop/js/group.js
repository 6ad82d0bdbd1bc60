'use strict'
// A kafkajs consumer group on one topic, end to end:
//   three members share the partitions -> one leaves, two take over ->
//   all stop -> more records -> a new member resumes from the committed offsets;
//   then admin fetchOffsets / describeGroups / listGroups / deleteGroups.
// Every record value is "<batch>-<i>", record i of a batch goes to partition i % partitions.
//
// stdin: {bootstrap, topic, group, partitions, batches: [n1, n2, n3]}
// stdout (JSON lines, in this order):
//   {"phase": "three"|"two"|"one", "assignments": {member: [partitions]},
//    "described": {state, protocol, protocolType, members: [{memberId, clientId, assignment}]}}
//   {"committed": <after phase>, "offsets": {partition: offset}}
//   {"step": <admin call>, "result"|"error": ...}
//   {"consumed": [[member, partition, offset, value], ...]}   (consumption order)
const { kafkajs, makeKafka, emit, errorInfo, sleep, waitFor, run } = require('./common')
const { AssignerProtocol, Partitioners } = kafkajs

run(async (cfg, cleanup) => {
  const { topic, group, partitions } = cfg
  const all = Array.from({ length: partitions }, (_, p) => p)
  const kafka = makeKafka(cfg.bootstrap, 'kafkajs-group-admin')
  const admin = kafka.admin()
  await admin.connect()
  cleanup.push(() => admin.disconnect())
  await admin.createTopics({ topics: [{ topic, numPartitions: partitions }], waitForLeaders: true })

  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner })
  await producer.connect()
  cleanup.push(() => producer.disconnect())
  const produce = async (batch, n) => {
    const messages = Array.from({ length: n }, (_, i) => ({ partition: i % partitions, value: `${batch}-${i}` }))
    await producer.send({ topic, messages })
  }

  const consumed = []
  const members = {}
  const startMember = async name => {
    const consumer = makeKafka(cfg.bootstrap, name).consumer({ groupId: group })
    const m = { name, consumer, assignment: null, memberId: null, joins: 0, running: true }
    consumer.on(consumer.events.GROUP_JOIN, e => {
      m.joins += 1
      m.memberId = e.payload.memberId
      m.assignment = (e.payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b)
    })
    members[name] = m
    cleanup.push(() => consumer.disconnect())
    await consumer.connect()
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        consumed.push([name, partition, Number(message.offset), message.value.toString()])
      },
    })
    return m
  }
  const stopMember = async name => {
    members[name].running = false
    await members[name].consumer.disconnect()
  }

  const describe = async () => {
    const { groups: [g] } = await admin.describeGroups([group])
    return {
      groupId: g.groupId,
      errorCode: g.errorCode,
      state: g.state,
      protocol: g.protocol,
      protocolType: g.protocolType,
      members: g.members.map(x => {
        const a = x.memberAssignment && x.memberAssignment.length
          ? AssignerProtocol.MemberAssignment.decode(x.memberAssignment) : null
        return {
          memberId: x.memberId,
          clientId: x.clientId,
          clientHost: x.clientHost,
          assignment: a ? (a.assignment[topic] || []).slice().sort((p, q) => p - q) : null,
        }
      }),
    }
  }

  // the live members' latest assignments are disjoint, non-empty, cover every partition,
  // and the group (as describeGroups sees it) is Stable with exactly these members
  const settled = async (phase, names) => {
    let described = null
    await waitFor(async () => {
      const sets = names.map(n => members[n].assignment)
      if (sets.some(s => !s || s.length === 0)) return false
      const flat = [].concat(...sets).sort((a, b) => a - b)
      if (JSON.stringify(flat) !== JSON.stringify(all)) return false
      described = await describe()
      const ids = names.map(n => members[n].memberId).sort()
      return described.state === 'Stable' &&
        JSON.stringify(described.members.map(x => x.memberId).sort()) === JSON.stringify(ids)
    }, 45000, `phase ${phase}: ${names.length} members to share ${partitions} partitions`)
    const assignments = {}
    for (const n of names) assignments[n] = members[n].assignment
    emit({ phase, assignments, joins: Object.fromEntries(names.map(n => [n, members[n].joins])), described })
  }

  const committedOffsets = async () => {
    const [t] = await admin.fetchOffsets({ groupId: group, topics: [topic] })
    return Object.fromEntries(t.partitions.map(p => [p.partition, Number(p.offset)]))
  }
  const waitCommitted = async (label, perPartition) => {
    let offsets
    await waitFor(async () => {
      offsets = await committedOffsets()
      return all.every(p => offsets[p] === perPartition[p])
    }, 30000, `committed offsets ${JSON.stringify(perPartition)} (${label})`)
    emit({ committed: label, offsets })
  }
  const expectedEnds = total => Object.fromEntries(all.map(p => [p, total.filter(n => n > 0).reduce(
    (s, n) => s + Math.floor(n / partitions) + (p < n % partitions ? 1 : 0), 0)]))

  const step = async (name, fn) => {
    try {
      const result = await fn()
      emit({ step: name, result: result === undefined ? null : result })
    } catch (e) {
      emit({ step: name, error: errorInfo(e) })
    }
  }

  const [n1, n2, n3] = cfg.batches
  await produce(1, n1)
  await Promise.all(['c1', 'c2', 'c3'].map(startMember))
  await settled('three', ['c1', 'c2', 'c3'])
  await waitFor(() => consumed.length >= n1, 30000, `${n1} records of batch 1`)
  await waitCommitted('batch1', expectedEnds([n1]))

  await stopMember('c1')
  await settled('two', ['c2', 'c3'])
  await produce(2, n2)
  await waitFor(() => consumed.length >= n1 + n2, 30000, `${n2} records of batch 2`)
  await waitCommitted('batch2', expectedEnds([n1, n2]))
  await Promise.all([stopMember('c2'), stopMember('c3')])
  await waitFor(async () => (await describe()).state === 'Empty', 20000, 'group to be Empty')

  await produce(3, n3)
  await producer.disconnect()
  await startMember('c4')
  await settled('one', ['c4'])
  await waitFor(() => consumed.length >= n1 + n2 + n3, 30000, `${n3} records of batch 3`)
  await waitCommitted('batch3', expectedEnds([n1, n2, n3]))
  await sleep(1000) // room for records that should not come (duplicates)

  await step('listGroupsActive', () => admin.listGroups())
  await step('deleteGroupsActive', () => admin.deleteGroups([group]))
  await stopMember('c4')
  await step('describeGroupsStopped', describe)
  await step('fetchOffsetsStopped', committedOffsets)
  await step('deleteGroups', () => admin.deleteGroups([group]))
  await step('listGroupsAfterDelete', () => admin.listGroups())
  await step('fetchOffsetsAfterDelete', committedOffsets)
  emit({ consumed })
})
