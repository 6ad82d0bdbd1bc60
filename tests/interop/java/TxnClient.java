// Transactions driver for klamm's interop tests, on the Apache Kafka Java client.
// Output is JSON, one object per line, on stdout.
//
//   produce <bootstrap> <txn-id> <topic> <txn>...
//       each <txn> is commit:v1,v2,... or abort:v1,v2,... : one transaction per argument, its values
//       sent round-robin over the topic's partitions; prints {"done":true}
//   consume <bootstrap> <topic> <isolation> <expected>
//       read_committed | read_uncommitted consumer of every partition from the start; stops after
//       <expected> records or 5 s without new ones; prints {"values":[...]} in consumption order per
//       partition, and {"end":{partition:offset}} (the positions it reached)
//   fence <bootstrap> <txn-id> <topic>
//       producer A begins a transaction and sends "a"; producer B (same txn id) initialises, which
//       fences A (aborting its transaction); A's commit fails; B commits "b". Prints {"fenced":"<exception>"}
//   ctp <bootstrap> <txn-id> <in> <out> <group>
//       consume-transform-produce over every record of <in> (read_committed, no auto commit): one
//       transaction that sends each value upper-cased to <out> and the next offsets with
//       sendOffsetsToTransaction. Prints {"before":{p:off}} (group offsets just before the commit),
//       then {"after":{p:off}}.
//   job <bootstrap> <txn-id> <in> <out> <group> <stop-file> [classic|consumer]
//       a long-running exactly-once consume-transform-produce job, as a Kafka Streams task runs one:
//       subscribes to <in> in <group> (read_committed), and for each poll writes every value + "-out"
//       to <out> and the consumed positions with sendOffsetsToTransaction, in one transaction.
//       An abortable error aborts and rewinds to the group's committed offsets; a fatal one (fenced,
//       timed-out transaction) starts a new producer with the same transactional id. With the environment's
//       TXN_JOB_ABORT_EVERY=n, every n-th transaction fails on purpose just before its commit, and is aborted
//       and rewound as above. Prints {"committed":n,"aborts":a,"restarts":r} after each commit and at the end,
//       once <stop-file> exists.
//   Kafka API errors print {"error":"<ExceptionSimpleName>","message":...} and return rc 3.

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TransactionAbortableException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class TxnClient {
    static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    public static void main(String[] args) throws Exception {
        try {
            switch (args[0]) {
                case "produce" -> produce(args[1], args[2], args[3], List.of(args).subList(4, args.length));
                case "consume" -> consume(args[1], args[2], args[3], Integer.parseInt(args[4]));
                case "fence" -> fence(args[1], args[2], args[3]);
                case "ctp" -> ctp(args[1], args[2], args[3], args[4], args[5]);
                case "job" -> job(args[1], args[2], args[3], args[4], args[5], Path.of(args[6]),
                                  args.length > 7 ? args[7] : "classic");
                default -> throw new IllegalArgumentException("unknown command " + args[0]);
            }
        } catch (KafkaException | ExecutionException e) {
            Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
            OUT.println("{\"error\":\"" + cause.getClass().getSimpleName() + "\",\"message\":" + quote(String.valueOf(cause.getMessage())) + "}");
            System.exit(3);
        }
        System.exit(0);
    }

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    static KafkaProducer<String, String> producer(String bootstrap, String txnId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String isolation, String group) {
        return consumer(bootstrap, isolation, group, "classic");
    }

    static KafkaConsumer<String, String> consumer(String bootstrap, String isolation, String group, String protocol) {
        Properties p = new Properties();
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        if (group != null) p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
    }

    static void produce(String bootstrap, String txnId, String topic, List<String> txns) {
        try (KafkaProducer<String, String> producer = producer(bootstrap, txnId)) {
            int partitions = producer.partitionsFor(topic).size();
            producer.initTransactions();
            int n = 0;
            for (String txn : txns) {
                String[] parts = txn.split(":", 2);
                producer.beginTransaction();
                for (String value : parts[1].split(",")) {
                    producer.send(new ProducerRecord<>(topic, n++ % partitions, null, value));
                }
                producer.flush();
                if (parts[0].equals("commit")) producer.commitTransaction();
                else producer.abortTransaction();
            }
        }
        OUT.println("{\"done\":true}");
    }

    static List<TopicPartition> partitions(KafkaConsumer<String, String> consumer, String topic) {
        List<TopicPartition> result = new ArrayList<>();
        for (PartitionInfo info : consumer.partitionsFor(topic)) result.add(new TopicPartition(topic, info.partition()));
        return result;
    }

    static void consume(String bootstrap, String topic, String isolation, int expected) {
        List<String> values = new ArrayList<>();
        Map<Integer, Long> end = new TreeMap<>();
        try (KafkaConsumer<String, String> consumer = consumer(bootstrap, isolation, null)) {
            List<TopicPartition> tps = partitions(consumer, topic);
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long quietSince = System.currentTimeMillis();
            while (values.size() < expected && System.currentTimeMillis() - quietSince < 5000) {
                var records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<String, String> r : records) values.add(r.value());
                if (!records.isEmpty()) quietSince = System.currentTimeMillis();
            }
            for (TopicPartition tp : tps) end.put(tp.partition(), consumer.position(tp));
        }
        StringBuilder sb = new StringBuilder("{\"values\":[");
        for (int i = 0; i < values.size(); i++) sb.append(i == 0 ? "" : ",").append(quote(values.get(i)));
        OUT.println(sb.append("]}"));
        OUT.println("{\"end\":" + json(end) + "}");
    }

    static String json(Map<Integer, Long> map) {
        StringBuilder sb = new StringBuilder("{");
        for (var e : map.entrySet()) sb.append(sb.length() > 1 ? "," : "").append("\"").append(e.getKey()).append("\":").append(e.getValue());
        return sb.append("}").toString();
    }

    static void fence(String bootstrap, String txnId, String topic) {
        KafkaProducer<String, String> a = producer(bootstrap, txnId);
        a.initTransactions();
        a.beginTransaction();
        a.send(new ProducerRecord<>(topic, 0, null, "a"));
        a.flush();
        try (KafkaProducer<String, String> b = producer(bootstrap, txnId)) {
            b.initTransactions();  // aborts A's transaction and fences A
            String fenced = "none";
            try {
                a.commitTransaction();  // EndTxn with the old epoch
            } catch (KafkaException e) {
                fenced = e.getClass().getSimpleName();
            }
            a.close(Duration.ZERO);
            b.beginTransaction();
            b.send(new ProducerRecord<>(topic, 0, null, "b"));
            b.commitTransaction();
            OUT.println("{\"fenced\":" + quote(fenced) + "}");
        }
    }

    static Map<Integer, Long> groupOffsets(Admin admin, String group, String topic) throws Exception {
        Map<Integer, Long> result = new TreeMap<>();
        for (var e : admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS).entrySet()) {
            if (e.getKey().topic().equals(topic) && e.getValue() != null) result.put(e.getKey().partition(), e.getValue().offset());
        }
        return result;
    }

    static void ctp(String bootstrap, String txnId, String in, String out, String group) throws Exception {
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (KafkaProducer<String, String> producer = producer(bootstrap, txnId);
             KafkaConsumer<String, String> consumer = consumer(bootstrap, "read_committed", group);
             Admin admin = Admin.create(ap)) {
            producer.initTransactions();
            List<TopicPartition> tps = partitions(consumer, in);
            consumer.assign(tps);
            Map<TopicPartition, Long> ends = consumer.endOffsets(tps);
            Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
            producer.beginTransaction();
            long deadline = System.currentTimeMillis() + 30000;
            while (System.currentTimeMillis() < deadline) {
                boolean done = true;
                for (TopicPartition tp : tps) done &= consumer.position(tp) >= ends.get(tp);
                if (done) break;
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    producer.send(new ProducerRecord<>(out, r.partition(), null, r.value().toUpperCase()));
                    offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                }
            }
            producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
            producer.flush();
            OUT.println("{\"before\":" + json(groupOffsets(admin, group, in)) + "}");
            producer.commitTransaction();
            // the commit markers reach a replicated __consumer_offsets after commitTransaction returns (as in
            // Kafka), and offsets are read at its high watermark: wait for them to show
            Map<Integer, Long> after = groupOffsets(admin, group, in);
            for (long end = System.currentTimeMillis() + 30_000; after.isEmpty() && System.currentTimeMillis() < end; ) {
                Thread.sleep(50);
                after = groupOffsets(admin, group, in);
            }
            OUT.println("{\"after\":" + json(after) + "}");
        }
    }

    static void job(String bootstrap, String txnId, String in, String out, String group, Path stop, String protocol) {
        long committed = 0, aborts = 0, restarts = 0, txns = 0;
        long abortEvery = Long.parseLong(System.getenv().getOrDefault("TXN_JOB_ABORT_EVERY", "0"));
        KafkaProducer<String, String> producer = producer(bootstrap, txnId);
        producer.initTransactions();
        try (KafkaConsumer<String, String> consumer = consumer(bootstrap, "read_committed", group, protocol)) {
            consumer.subscribe(List.of(in));
            while (!Files.exists(stop)) {
                var records = consumer.poll(Duration.ofMillis(100));
                if (records.isEmpty()) continue;
                boolean done = false;
                try {
                    producer.beginTransaction();
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    for (ConsumerRecord<String, String> r : records) {
                        producer.send(new ProducerRecord<>(out, r.key(), r.value() + "-out"));
                        offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    producer.sendOffsetsToTransaction(offsets, consumer.groupMetadata());
                    if (abortEvery > 0 && ++txns % abortEvery == 0) throw new KafkaException("a deliberate abort");
                    commit(producer);
                    committed += records.count();
                    done = true;
                } catch (ProducerFencedException | InvalidProducerEpochException | OutOfOrderSequenceException e) {
                    System.err.println("restarting the producer: " + e);
                } catch (KafkaException e) {
                    System.err.println("aborting: " + e);
                    if (abort(producer)) {
                        aborts++;
                        rewind(consumer);
                        done = true;
                    }
                }
                if (!done) {
                    // Fatal for this producer instance (e.g. the coordinator timed its transaction out): a new
                    // one with the same id fences the old epoch and aborts what it left open.
                    producer.close(Duration.ZERO);
                    producer = producer(bootstrap, txnId);
                    producer.initTransactions();
                    restarts++;
                    rewind(consumer);
                }
                OUT.println("{\"committed\":" + committed + ",\"aborts\":" + aborts + ",\"restarts\":" + restarts + "}");
            }
        } finally {
            producer.close(Duration.ofSeconds(5));
        }
        OUT.println("{\"committed\":" + committed + ",\"aborts\":" + aborts + ",\"restarts\":" + restarts
                    + ",\"done\":true}");
    }

    /** Commit; a commit that timed out may or may not have happened, and must be retried (the Java client's rule). */
    static void commit(KafkaProducer<String, String> producer) {
        while (true) {
            try {
                producer.commitTransaction();
                return;
            } catch (org.apache.kafka.common.errors.TimeoutException e) {
                System.err.println("commit timed out, retrying: " + e);
            }
        }
    }

    /** Abort the open transaction (retried while it times out); false if the producer cannot (fatal state). */
    static boolean abort(KafkaProducer<String, String> producer) {
        while (true) {
            try {
                producer.abortTransaction();
                return true;
            } catch (org.apache.kafka.common.errors.TimeoutException e) {
                System.err.println("abort timed out, retrying: " + e);
            } catch (KafkaException e) {
                System.err.println("cannot abort: " + e);
                return false;
            }
        }
    }

    /** After an abort, consume again from the group's committed offsets (or the start). */
    static void rewind(KafkaConsumer<String, String> consumer) {
        var assignment = consumer.assignment();
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assignment, Duration.ofSeconds(30));
        for (TopicPartition tp : assignment) {
            OffsetAndMetadata offset = committed.get(tp);
            if (offset == null) consumer.seekToBeginning(List.of(tp));
            else consumer.seek(tp, offset.offset());
        }
    }
}
