// Small CLI driving the Apache Kafka Java client (3.9.1) against a broker, for
// klamm's interoperability tests.  Output is JSON, one object per line, on
// stdout; diagnostics go to stderr.  Exit code 0 on success, != 0 on failure.
//
//   produce <bootstrap> <topic> <count> <compression> [size] [opt=value ...]
//       opts: size=N partition=N(-1: partitioner) acks=all|1|0 prefix=S
//             ts=<base ms: record i gets base+i> idempotence=true|false
//             linger=ms batch=bytes delivery=<delivery.timeout.ms>
//             rate=<records per second, 0 = as fast as possible>
//       Records are generated deterministically (see tests/interop/records.py):
//       record i: key null when i%5==4, value null when i%7==6, headers
//       absent when i%3==2.  Prints {"i","partition","offset","timestamp"} per ack.
//   consume <bootstrap> <topic> <partition> <fromOffset> <count|all> [timeoutMs]
//       assign + seek, prints every record (key/value/header values base64).
//   admin-create <bootstrap> <topic> <partitions> [rf] [config.name=value ...]
//   admin-list <bootstrap>
//   admin-describe <bootstrap> <topic> [topic ...]
//   admin-delete <bootstrap> <topic> [topic ...]
//   admin-describe-cluster <bootstrap>
//   admin-describe-quorum <bootstrap> [controller]
//       Admin.describeMetadataQuorum(); with "controller", <bootstrap> is bootstrap.controllers.
//       Prints {"leaderId","leaderEpoch","highWatermark","voters":[...],"observers":[...],"nodes":{...}}.
//   admin-list-offsets <bootstrap> <topic> <partition> <spec> [spec ...]
//       spec: earliest | latest | max-timestamp | <timestamp ms>
//   scram-upsert <bootstrap> <user> <SCRAM-SHA-256|SCRAM-SHA-512> <iterations> <password>
//       Admin.alterUserScramCredentials (one upsertion); prints {"upserted","mechanism","iterations"}.
//   scram-describe <bootstrap> [user ...]
//       Admin.describeUserScramCredentials (all users when none is named); prints
//       {"user","credentials":[{"mechanism","iterations"}]} per user.
//   batch
//       reads one command per line from stdin and runs them all in this JVM;
//       each is framed by {"batch":n,"args":[...]} and {"batch_end":n,"rc":rc}.
//       Exit code is the largest rc.
//
// Kafka API errors print {"error":"<ExceptionSimpleName>","message":...} and exit 3
// (an authentication failure: {"error":"SaslAuthenticationException",...}).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.CreateDelegationTokenOptions;
import org.apache.kafka.clients.admin.ExpireDelegationTokenOptions;
import org.apache.kafka.clients.admin.RenewDelegationTokenOptions;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.token.delegation.DelegationToken;
import org.apache.kafka.common.security.token.delegation.TokenInformation;
import org.apache.kafka.common.utils.SecurityUtils;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.RaftVoterEndpoint;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialAlteration;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KlammClient {
    static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    static final long OP_TIMEOUT_S = 30;
    static final String FILLER = "0123456789abcdefghijklmnopqrstuvwxyz";

    static final class UsageError extends RuntimeException {
        UsageError(String m) { super(m); }
    }

    public static void main(String[] args) {
        int rc;
        if (args.length >= 1 && args[0].equals("batch")) {
            rc = runBatch();
        } else {
            rc = runOne(args);
        }
        OUT.flush();
        System.exit(rc);
    }

    static int runBatch() {
        int worst = 0;
        try {
            BufferedReader r = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            int n = 0;
            while ((line = r.readLine()) != null) {
                line = line.trim();
                if (line.isEmpty() || line.startsWith("#")) continue;
                String[] a = line.split("\\s+");
                OUT.println("{\"batch\":" + n + ",\"args\":" + jsonStrings(List.of(a)) + "}");
                int rc = runOne(a);
                OUT.println("{\"batch_end\":" + n + ",\"rc\":" + rc + "}");
                worst = Math.max(worst, rc);
                n++;
            }
        } catch (Exception e) {
            e.printStackTrace();
            return 1;
        }
        return worst;
    }

    static int runOne(String[] a) {
        try {
            if (a.length < 2) throw new UsageError("missing command/bootstrap");
            switch (a[0]) {
                case "produce": return produce(a);
                case "consume": return consume(a);
                case "admin-create": return adminCreate(a);
                case "admin-list": return adminList(a);
                case "admin-describe": return adminDescribe(a);
                case "admin-delete": return adminDelete(a);
                case "admin-describe-cluster": return adminDescribeCluster(a);
                case "admin-describe-quorum": return adminDescribeQuorum(a);
                case "admin-list-offsets": return adminListOffsets(a);
                case "scram-upsert": return scramUpsert(a);
                case "scram-describe": return scramDescribe(a);
                case "token-create": return tokenCreate(a);
                case "token-describe": return tokenDescribe(a);
                case "token-renew": return tokenRenew(a);
                case "token-expire": return tokenExpire(a);
                default: throw new UsageError("unknown command " + a[0]);
            }
        } catch (UsageError e) {
            System.err.println("usage error: " + e.getMessage());
            return 64;
        } catch (Throwable t) {
            return reportError(t);
        }
    }

    static int reportError(Throwable t) {
        Throwable c = t;
        while ((c instanceof ExecutionException || c.getClass() == KafkaException.class)
                && c.getCause() != null) {
            c = c.getCause();
        }
        c.printStackTrace();
        OUT.println("{\"error\":" + q(c.getClass().getSimpleName()) + ",\"message\":" + q(String.valueOf(c.getMessage())) + "}");
        return (c instanceof org.apache.kafka.common.errors.ApiException) ? 3 : 1;
    }

    // ------------------------------------------------------------ records --
    static byte[] key(String prefix, int i) {
        if (i % 5 == 4) return null;
        return (prefix + "-key-" + i).getBytes(StandardCharsets.UTF_8);
    }

    static byte[] value(String prefix, int i, int size) {
        if (i % 7 == 6) return null;
        byte[] base = (prefix + "-value-" + i).getBytes(StandardCharsets.UTF_8);
        if (size <= 0) return base;
        byte[] v = new byte[size];
        for (int j = 0; j < size; j++) {
            v[j] = j < base.length ? base[j] : (byte) FILLER.charAt((j - base.length) % FILLER.length());
        }
        return v;
    }

    static List<Header> headers(int i) {
        List<Header> h = new ArrayList<>();
        if (i % 3 == 2) return h;
        h.add(new RecordHeader("idx", Integer.toString(i).getBytes(StandardCharsets.UTF_8)));
        h.add(new RecordHeader("bin", new byte[] {(byte) (i % 256), 0, (byte) 255}));
        if (i % 6 == 0) h.add(new RecordHeader("nullh", null));
        return h;
    }

    static Map<String, String> opts(String[] a, int from) {
        Map<String, String> m = new HashMap<>();
        for (int k = from; k < a.length; k++) {
            int eq = a[k].indexOf('=');
            if (eq < 0) {
                if (!m.containsKey("size")) { m.put("size", a[k]); continue; }
                throw new UsageError("bad option " + a[k]);
            }
            m.put(a[k].substring(0, eq), a[k].substring(eq + 1));
        }
        return m;
    }

    // ------------------------------------------------------------ produce --
    static int produce(String[] a) throws Exception {
        if (a.length < 5) throw new UsageError("produce <bootstrap> <topic> <count> <compression> [size] [opt=value...]");
        String topic = a[2];
        int count = Integer.parseInt(a[3]);
        String compression = a[4];
        Map<String, String> o = opts(a, 5);
        int size = Integer.parseInt(o.getOrDefault("size", "0"));
        int partition = Integer.parseInt(o.getOrDefault("partition", "0"));
        String prefix = o.getOrDefault("prefix", "r");
        long tsBase = Long.parseLong(o.getOrDefault("ts", "-1"));

        Properties p = clientProperties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, a[1]);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, compression);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, "klamm-interop-java-producer");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "45000");
        if (size > 900_000) p.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, Integer.toString(size + 100_000));
        if (o.containsKey("acks")) p.put(ProducerConfig.ACKS_CONFIG, o.get("acks"));
        if (o.containsKey("idempotence")) p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, o.get("idempotence"));
        if (o.containsKey("linger")) p.put(ProducerConfig.LINGER_MS_CONFIG, o.get("linger"));
        if (o.containsKey("batch")) p.put(ProducerConfig.BATCH_SIZE_CONFIG, o.get("batch"));
        if (o.containsKey("delivery")) p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, o.get("delivery"));
        int rate = Integer.parseInt(o.getOrDefault("rate", "0"));
        long started = System.nanoTime();

        AtomicInteger failures = new AtomicInteger();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                final int idx = i;
                if (rate > 0) {  // paced: record i is sent no earlier than i / rate seconds after the start
                    long due = started + (long) i * 1_000_000_000L / rate;
                    long wait = due - System.nanoTime();
                    if (wait > 0) Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
                ProducerRecord<byte[], byte[]> rec = new ProducerRecord<>(
                        topic, partition < 0 ? null : partition,
                        tsBase < 0 ? null : tsBase + i,
                        key(prefix, i), value(prefix, i, size), headers(i));
                producer.send(rec, (md, ex) -> {
                    synchronized (OUT) {
                        if (ex != null) {
                            failures.incrementAndGet();
                            OUT.println("{\"i\":" + idx + ",\"error\":" + q(ex.getClass().getSimpleName())
                                    + ",\"message\":" + q(String.valueOf(ex.getMessage())) + "}");
                        } else {
                            OUT.println("{\"i\":" + idx + ",\"partition\":" + md.partition() + ",\"offset\":"
                                    + md.offset() + ",\"timestamp\":" + md.timestamp() + "}");
                        }
                    }
                });
            }
            producer.flush();
        }
        return failures.get() == 0 ? 0 : 3;
    }

    // ------------------------------------------------------------ consume --
    static int consume(String[] a) throws Exception {
        if (a.length < 6) throw new UsageError("consume <bootstrap> <topic> <partition> <fromOffset> <count|all> [timeoutMs]");
        TopicPartition tp = new TopicPartition(a[2], Integer.parseInt(a[3]));
        long from = Long.parseLong(a[4]);
        boolean all = a[5].equals("all");
        long count = all ? -1 : Long.parseLong(a[5]);
        long timeoutMs = a.length > 6 ? Long.parseLong(a[6]) : 30000;

        Properties p = clientProperties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, a[1]);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "klamm-interop-java-consumer");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");

        long deadline = System.currentTimeMillis() + timeoutMs;
        long got = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            consumer.assign(Collections.singletonList(tp));
            if (all) {
                long end = consumer.endOffsets(Collections.singletonList(tp), Duration.ofSeconds(OP_TIMEOUT_S)).get(tp);
                count = Math.max(0, end - from);
            }
            consumer.seek(tp, from);
            while (got < count) {
                long left = deadline - System.currentTimeMillis();
                if (left <= 0) break;
                ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(Math.min(left, 500)));
                for (ConsumerRecord<byte[], byte[]> r : recs.records(tp)) {
                    if (got >= count) break;
                    OUT.println(recordJson(r));
                    got++;
                }
            }
        }
        if (got < count) {
            OUT.println("{\"error\":\"Timeout\",\"message\":" + q("got " + got + " of " + count + " records") + "}");
            return 2;
        }
        return 0;
    }

    static String recordJson(ConsumerRecord<byte[], byte[]> r) {
        StringBuilder sb = new StringBuilder(256);
        sb.append("{\"partition\":").append(r.partition())
          .append(",\"offset\":").append(r.offset())
          .append(",\"timestamp\":").append(r.timestamp())
          .append(",\"timestampType\":").append(q(r.timestampType().name))
          .append(",\"leaderEpoch\":").append(r.leaderEpoch().map(String::valueOf).orElse("null"))
          .append(",\"key\":").append(b64(r.key()))
          .append(",\"value\":").append(b64(r.value()))
          .append(",\"headers\":[");
        boolean first = true;
        for (Header h : r.headers()) {
            if (!first) sb.append(',');
            first = false;
            sb.append('[').append(q(h.key())).append(',').append(b64(h.value())).append(']');
        }
        sb.append("]}");
        return sb.toString();
    }

    // -------------------------------------------------------------- admin --
    static Admin admin(String bootstrap) {
        return admin(bootstrap, AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG);
    }

    /** Properties every client starts from: the file KLAMM_CLIENT_PROPERTIES names (security settings), if any. */
    static Properties clientProperties() {
        Properties p = new Properties();
        String file = System.getenv("KLAMM_CLIENT_PROPERTIES");
        if (file != null && !file.isEmpty()) {
            try (java.io.FileInputStream in = new java.io.FileInputStream(file)) {
                p.load(in);
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
        return p;
    }

    static Admin admin(String bootstrap, String bootstrapKey) {
        Properties p = clientProperties();
        p.put(bootstrapKey, bootstrap);
        p.put(AdminClientConfig.CLIENT_ID_CONFIG, "klamm-interop-java-admin");
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(p);
    }

    static int adminCreate(String[] a) throws Exception {
        if (a.length < 4) throw new UsageError("admin-create <bootstrap> <topic> <partitions> [rf] [k=v...]");
        int partitions = Integer.parseInt(a[3]);
        short rf = -1;  // the broker's default.replication.factor
        Map<String, String> configs = new HashMap<>();
        for (int k = 4; k < a.length; k++) {
            int eq = a[k].indexOf('=');
            if (eq < 0) rf = Short.parseShort(a[k]);
            else configs.put(a[k].substring(0, eq), a[k].substring(eq + 1));
        }
        try (Admin admin = admin(a[1])) {
            NewTopic nt = new NewTopic(a[2], partitions, rf).configs(configs);
            admin.createTopics(List.of(nt)).all().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
        }
        OUT.println("{\"created\":" + q(a[2]) + "}");
        return 0;
    }

    static int adminList(String[] a) throws Exception {
        try (Admin admin = admin(a[1])) {
            Set<String> names = new TreeSet<>(admin.listTopics().names().get(OP_TIMEOUT_S, TimeUnit.SECONDS));
            OUT.println("{\"topics\":" + jsonStrings(names) + "}");
        }
        return 0;
    }

    static int adminDescribe(String[] a) throws Exception {
        if (a.length < 3) throw new UsageError("admin-describe <bootstrap> <topic...>");
        List<String> topics = List.of(a).subList(2, a.length);
        try (Admin admin = admin(a[1])) {
            Map<String, TopicDescription> d = admin.describeTopics(topics).allTopicNames().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
            for (String t : topics) {
                TopicDescription td = d.get(t);
                StringBuilder sb = new StringBuilder();
                sb.append("{\"name\":").append(q(td.name()))
                  .append(",\"internal\":").append(td.isInternal())
                  .append(",\"topicId\":").append(q(String.valueOf(td.topicId())))
                  .append(",\"partitions\":[");
                boolean first = true;
                for (TopicPartitionInfo pi : td.partitions()) {
                    if (!first) sb.append(',');
                    first = false;
                    sb.append("{\"partition\":").append(pi.partition())
                      .append(",\"leader\":").append(pi.leader() == null ? "null" : Integer.toString(pi.leader().id()))
                      .append(",\"replicas\":").append(nodeIds(pi.replicas()))
                      .append(",\"isr\":").append(nodeIds(pi.isr()))
                      .append('}');
                }
                sb.append("]}");
                OUT.println(sb);
            }
        }
        return 0;
    }

    static int adminDelete(String[] a) throws Exception {
        if (a.length < 3) throw new UsageError("admin-delete <bootstrap> <topic...>");
        List<String> topics = List.of(a).subList(2, a.length);
        try (Admin admin = admin(a[1])) {
            admin.deleteTopics(topics).all().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
        }
        OUT.println("{\"deleted\":" + jsonStrings(topics) + "}");
        return 0;
    }

    static int adminDescribeCluster(String[] a) throws Exception {
        try (Admin admin = admin(a[1])) {
            DescribeClusterResult r = admin.describeCluster();
            String clusterId = r.clusterId().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
            Node controller = r.controller().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
            Collection<Node> nodes = r.nodes().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
            StringBuilder sb = new StringBuilder();
            sb.append("{\"clusterId\":").append(q(clusterId))
              .append(",\"controller\":").append(controller == null ? "null" : Integer.toString(controller.id()))
              .append(",\"nodes\":[");
            boolean first = true;
            for (Node n : nodes) {
                if (!first) sb.append(',');
                first = false;
                sb.append("{\"id\":").append(n.id()).append(",\"host\":").append(q(n.host()))
                  .append(",\"port\":").append(n.port()).append('}');
            }
            sb.append("]}");
            OUT.println(sb);
        }
        return 0;
    }

    static int adminDescribeQuorum(String[] a) throws Exception {
        boolean controllers = a.length > 2 && a[2].equals("controller");
        String key = controllers ? AdminClientConfig.BOOTSTRAP_CONTROLLERS_CONFIG
                                 : AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG;
        try (Admin admin = admin(a[1], key)) {
            QuorumInfo q = admin.describeMetadataQuorum().quorumInfo().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
            StringBuilder sb = new StringBuilder();
            sb.append("{\"leaderId\":").append(q.leaderId())
              .append(",\"leaderEpoch\":").append(q.leaderEpoch())
              .append(",\"highWatermark\":").append(q.highWatermark())
              .append(",\"voters\":").append(replicaStates(q.voters()))
              .append(",\"observers\":").append(replicaStates(q.observers()))
              .append(",\"nodes\":{");
            boolean first = true;
            for (QuorumInfo.Node n : q.nodes().values()) {
                if (!first) sb.append(',');
                first = false;
                List<String> endpoints = new ArrayList<>();
                for (RaftVoterEndpoint e : n.endpoints()) endpoints.add(e.toString());
                sb.append(q(Integer.toString(n.nodeId()))).append(':').append(jsonStrings(endpoints));
            }
            sb.append("}}");
            OUT.println(sb);
        }
        return 0;
    }

    static String replicaStates(List<QuorumInfo.ReplicaState> states) {
        StringBuilder sb = new StringBuilder("[");
        for (QuorumInfo.ReplicaState r : states) {
            if (sb.length() > 1) sb.append(',');
            sb.append("{\"id\":").append(r.replicaId())
              .append(",\"directoryId\":").append(q(r.replicaDirectoryId().toString()))
              .append(",\"logEndOffset\":").append(r.logEndOffset())
              .append(",\"lastFetchTimestamp\":").append(r.lastFetchTimestamp().orElse(-1))
              .append(",\"lastCaughtUpTimestamp\":").append(r.lastCaughtUpTimestamp().orElse(-1))
              .append('}');
        }
        return sb.append(']').toString();
    }

    static int adminListOffsets(String[] a) throws Exception {
        if (a.length < 5) throw new UsageError("admin-list-offsets <bootstrap> <topic> <partition> <spec...>");
        TopicPartition tp = new TopicPartition(a[2], Integer.parseInt(a[3]));
        try (Admin admin = admin(a[1])) {
            for (int k = 4; k < a.length; k++) {
                String s = a[k];
                OffsetSpec spec;
                switch (s) {
                    case "earliest": spec = OffsetSpec.earliest(); break;
                    case "latest": spec = OffsetSpec.latest(); break;
                    case "max-timestamp": spec = OffsetSpec.maxTimestamp(); break;
                    default: spec = OffsetSpec.forTimestamp(Long.parseLong(s));
                }
                ListOffsetsResult.ListOffsetsResultInfo info =
                        admin.listOffsets(Map.of(tp, spec)).partitionResult(tp).get(OP_TIMEOUT_S, TimeUnit.SECONDS);
                OUT.println("{\"spec\":" + q(s) + ",\"offset\":" + info.offset() + ",\"timestamp\":" + info.timestamp()
                        + ",\"leaderEpoch\":" + info.leaderEpoch().map(String::valueOf).orElse("null") + "}");
            }
        }
        return 0;
    }

    // -------------------------------------------------------------- scram --
    static int scramUpsert(String[] a) throws Exception {
        if (a.length != 6) throw new UsageError("scram-upsert <bootstrap> <user> <mechanism> <iterations> <password>");
        ScramMechanism mechanism = ScramMechanism.fromMechanismName(a[3]);
        if (mechanism == ScramMechanism.UNKNOWN) throw new UsageError("unknown SCRAM mechanism " + a[3]);
        int iterations = Integer.parseInt(a[4]);
        List<UserScramCredentialAlteration> alterations = List.of(
                new UserScramCredentialUpsertion(a[2], new ScramCredentialInfo(mechanism, iterations), a[5]));
        try (Admin admin = admin(a[1])) {
            admin.alterUserScramCredentials(alterations).all().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
        }
        OUT.println("{\"upserted\":" + q(a[2]) + ",\"mechanism\":" + q(mechanism.mechanismName())
                + ",\"iterations\":" + iterations + "}");
        return 0;
    }

    static int scramDescribe(String[] a) throws Exception {
        List<String> users = List.of(a).subList(2, a.length);
        try (Admin admin = admin(a[1])) {
            Map<String, UserScramCredentialsDescription> d = (users.isEmpty()
                    ? admin.describeUserScramCredentials()
                    : admin.describeUserScramCredentials(users)).all().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
            for (String user : new TreeSet<>(d.keySet())) {
                StringBuilder sb = new StringBuilder();
                sb.append("{\"user\":").append(q(user)).append(",\"credentials\":[");
                boolean first = true;
                for (ScramCredentialInfo info : d.get(user).credentialInfos()) {
                    if (!first) sb.append(',');
                    first = false;
                    sb.append("{\"mechanism\":").append(q(info.mechanism().mechanismName()))
                      .append(",\"iterations\":").append(info.iterations()).append('}');
                }
                sb.append("]}");
                OUT.println(sb);
            }
        }
        return 0;
    }

    // ------------------------------------------------------ delegation tokens --
    static String tokenJson(DelegationToken token) {
        TokenInformation info = token.tokenInfo();
        StringBuilder sb = new StringBuilder();
        sb.append("{\"tokenId\":").append(q(info.tokenId()))
          .append(",\"hmac\":").append(q(token.hmacAsBase64String()))
          .append(",\"owner\":").append(q(info.ownerAsString()))
          .append(",\"requester\":").append(q(info.tokenRequester().toString()))
          .append(",\"issue\":").append(info.issueTimestamp())
          .append(",\"expiry\":").append(info.expiryTimestamp())
          .append(",\"max\":").append(info.maxTimestamp())
          .append(",\"renewers\":[");
        boolean first = true;
        for (KafkaPrincipal renewer : info.renewers()) {
            if (!first) sb.append(',');
            first = false;
            sb.append(q(renewer.toString()));
        }
        return sb.append("]}").toString();
    }

    static int tokenCreate(String[] a) throws Exception {
        if (a.length < 2) throw new UsageError("token-create <bootstrap> [renewer...]");
        List<KafkaPrincipal> renewers = new ArrayList<>();
        for (int i = 2; i < a.length; i++) renewers.add(SecurityUtils.parseKafkaPrincipal(a[i]));
        try (Admin admin = admin(a[1])) {
            DelegationToken token = admin.createDelegationToken(new CreateDelegationTokenOptions().renewers(renewers))
                    .delegationToken().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
            OUT.println(tokenJson(token));
        }
        return 0;
    }

    static int tokenDescribe(String[] a) throws Exception {
        try (Admin admin = admin(a[1])) {
            for (DelegationToken token : admin.describeDelegationToken().delegationTokens()
                    .get(OP_TIMEOUT_S, TimeUnit.SECONDS)) {
                OUT.println(tokenJson(token));
            }
        }
        return 0;
    }

    static int tokenRenew(String[] a) throws Exception {
        if (a.length < 4) throw new UsageError("token-renew <bootstrap> <hmac base64> <period ms>");
        try (Admin admin = admin(a[1])) {
            long expiry = admin.renewDelegationToken(Base64.getDecoder().decode(a[2]),
                    new RenewDelegationTokenOptions().renewTimePeriodMs(Long.parseLong(a[3])))
                    .expiryTimestamp().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
            OUT.println("{\"expiry\":" + expiry + "}");
        }
        return 0;
    }

    static int tokenExpire(String[] a) throws Exception {
        if (a.length < 4) throw new UsageError("token-expire <bootstrap> <hmac base64> <period ms>");
        try (Admin admin = admin(a[1])) {
            long expiry = admin.expireDelegationToken(Base64.getDecoder().decode(a[2]),
                    new ExpireDelegationTokenOptions().expiryTimePeriodMs(Long.parseLong(a[3])))
                    .expiryTimestamp().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
            OUT.println("{\"expiry\":" + expiry + "}");
        }
        return 0;
    }

    // --------------------------------------------------------------- json --
    static String nodeIds(List<Node> nodes) {
        StringBuilder sb = new StringBuilder("[");
        for (int k = 0; k < nodes.size(); k++) {
            if (k > 0) sb.append(',');
            sb.append(nodes.get(k).id());
        }
        return sb.append(']').toString();
    }

    static String b64(byte[] b) {
        return b == null ? "null" : "\"" + Base64.getEncoder().encodeToString(b) + "\"";
    }

    static String jsonStrings(Collection<String> xs) {
        StringBuilder sb = new StringBuilder("[");
        boolean first = true;
        for (String x : xs) {
            if (!first) sb.append(',');
            first = false;
            sb.append(q(x));
        }
        return sb.append(']').toString();
    }

    static String q(String s) {
        if (s == null) return "null";
        StringBuilder sb = new StringBuilder(s.length() + 2).append('"');
        for (int k = 0; k < s.length(); k++) {
            char c = s.charAt(k);
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                    else sb.append(c);
            }
        }
        return sb.append('"').toString();
    }
}
