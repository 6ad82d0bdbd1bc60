// Config and log-management driver for klamm's interop tests, on the Apache Kafka Java AdminClient.
// Output is JSON, one object per line, on stdout.
//
//   batch      one command per line on stdin, each framed by {"batch":n} ... {"batch_end":n,"rc":rc}:
//     describe-topic <bootstrap> <topic>               {"configs":{name:{value,source,readOnly,sensitive,type,doc,synonyms:[[name,value,source]..]}}}
//     describe-broker <bootstrap> <id>                 the same for a broker ("" is written as -)
//     incremental <bootstrap> topic|broker <name> <OP> <key> [value]   OP: SET DELETE APPEND SUBTRACT
//     alter <bootstrap> <topic> <key>=<value> ...       legacy AlterConfigs (replaces every override)
//     delete-records <bootstrap> <topic> <partition> <offset>          {"low_watermark":n}
//     log-dirs <bootstrap> <broker>                    {"dirs":{path:{"total":t,"usable":u,"replicas":{"topic-p":size}}}}
//     producers <bootstrap> <topic> <partition>         {"producers":[{"id":..,"epoch":..,"last_sequence":..}]}
//     produce <bootstrap> <topic> <count> <size>       idempotent producer, acks=all: {"sent":n}
//   Kafka API errors print {"error":"<ExceptionSimpleName>","message":...} and return rc 3.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.DescribeProducersResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class ConfigClient {
    static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    static final long OP_TIMEOUT_S = 30;

    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("batch")) {
            System.exit(batch());
        }
        System.exit(run(args));
    }

    static int batch() throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        int n = 0, worst = 0;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) continue;
            OUT.println("{\"batch\":" + n + ",\"args\":" + q(line) + "}");
            int rc = run(line.split("\\s+"));
            OUT.println("{\"batch_end\":" + n + ",\"rc\":" + rc + "}");
            worst = Math.max(worst, rc);
            n++;
        }
        return worst;
    }

    static int run(String[] args) {
        try {
            switch (args[0]) {
                case "describe-topic": return describe(args[1], ConfigResource.Type.TOPIC, args[2]);
                case "describe-broker": return describe(args[1], ConfigResource.Type.BROKER, args[2].equals("-") ? "" : args[2]);
                case "incremental": return incremental(args);
                case "alter": return alter(args);
                case "delete-records": return deleteRecords(args[1], args[2], Integer.parseInt(args[3]), Long.parseLong(args[4]));
                case "log-dirs": return logDirs(args[1], Integer.parseInt(args[2]));
                case "producers": return producers(args[1], args[2], Integer.parseInt(args[3]));
                case "produce": return produce(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]));
                default:
                    OUT.println("{\"error\":\"usage\",\"message\":" + q("unknown command " + args[0]) + "}");
                    return 2;
            }
        } catch (ExecutionException e) {
            Throwable cause = e.getCause() == null ? e : e.getCause();
            OUT.println("{\"error\":" + q(cause.getClass().getSimpleName()) + ",\"message\":" + q(String.valueOf(cause.getMessage())) + "}");
            return 3;
        } catch (KafkaException e) {
            OUT.println("{\"error\":" + q(e.getClass().getSimpleName()) + ",\"message\":" + q(String.valueOf(e.getMessage())) + "}");
            return 3;
        } catch (Exception e) {
            OUT.println("{\"error\":" + q(e.getClass().getSimpleName()) + ",\"message\":" + q(String.valueOf(e.getMessage())) + "}");
            return 1;
        }
    }

    static Admin admin(String bootstrap) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 20000);
        return Admin.create(p);
    }

    static int describe(String bootstrap, ConfigResource.Type type, String name) throws Exception {
        ConfigResource resource = new ConfigResource(type, name);
        try (Admin admin = admin(bootstrap)) {
            DescribeConfigsOptions options = new DescribeConfigsOptions().includeSynonyms(true).includeDocumentation(true);
            Config config = admin.describeConfigs(List.of(resource), options).all().get(OP_TIMEOUT_S, TimeUnit.SECONDS).get(resource);
            StringBuilder sb = new StringBuilder("{\"configs\":{");
            boolean first = true;
            for (ConfigEntry entry : config.entries()) {
                if (!first) sb.append(',');
                first = false;
                sb.append(q(entry.name())).append(":{\"value\":").append(q(entry.value()))
                    .append(",\"source\":").append(q(entry.source().name()))
                    .append(",\"readOnly\":").append(entry.isReadOnly())
                    .append(",\"sensitive\":").append(entry.isSensitive())
                    .append(",\"type\":").append(q(entry.type().name()))
                    .append(",\"doc\":").append(q(entry.documentation()))
                    .append(",\"synonyms\":[");
                boolean firstSynonym = true;
                for (ConfigEntry.ConfigSynonym s : entry.synonyms()) {
                    if (!firstSynonym) sb.append(',');
                    firstSynonym = false;
                    sb.append('[').append(q(s.name())).append(',').append(q(s.value())).append(',')
                        .append(q(s.source().name())).append(']');
                }
                sb.append("]}");
            }
            OUT.println(sb.append("}}"));
        }
        return 0;
    }

    static int incremental(String[] args) throws Exception {
        ConfigResource.Type type = args[2].equals("topic") ? ConfigResource.Type.TOPIC : ConfigResource.Type.BROKER;
        String name = args[3].equals("-") ? "" : args[3];
        AlterConfigOp.OpType op = AlterConfigOp.OpType.valueOf(args[4]);
        String value = args.length > 6 ? args[6] : null;
        ConfigResource resource = new ConfigResource(type, name);
        try (Admin admin = admin(args[1])) {
            Map<ConfigResource, Collection<AlterConfigOp>> ops = Map.of(resource,
                List.of(new AlterConfigOp(new ConfigEntry(args[5], value), op)));
            admin.incrementalAlterConfigs(ops).all().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
        }
        OUT.println("{\"ok\":true}");
        return 0;
    }

    @SuppressWarnings("deprecation")
    static int alter(String[] args) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, args[2]);
        List<ConfigEntry> entries = new ArrayList<>();
        for (int i = 3; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            entries.add(new ConfigEntry(kv[0], kv[1]));
        }
        try (Admin admin = admin(args[1])) {
            admin.alterConfigs(Map.of(resource, new Config(entries))).all().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
        }
        OUT.println("{\"ok\":true}");
        return 0;
    }

    static int deleteRecords(String bootstrap, String topic, int partition, long offset) throws Exception {
        TopicPartition tp = new TopicPartition(topic, partition);
        try (Admin admin = admin(bootstrap)) {
            long low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(offset)))
                .lowWatermarks().get(tp).get(OP_TIMEOUT_S, TimeUnit.SECONDS).lowWatermark();
            OUT.println("{\"low_watermark\":" + low + "}");
        }
        return 0;
    }

    static int logDirs(String bootstrap, int broker) throws Exception {
        try (Admin admin = admin(bootstrap)) {
            Map<String, LogDirDescription> dirs = admin.describeLogDirs(List.of(broker)).descriptions()
                .get(broker).get(OP_TIMEOUT_S, TimeUnit.SECONDS);
            StringBuilder sb = new StringBuilder("{\"dirs\":{");
            boolean first = true;
            for (Map.Entry<String, LogDirDescription> dir : dirs.entrySet()) {
                if (!first) sb.append(',');
                first = false;
                LogDirDescription d = dir.getValue();
                sb.append(q(dir.getKey())).append(":{\"total\":").append(d.totalBytes().orElse(-1))
                    .append(",\"usable\":").append(d.usableBytes().orElse(-1)).append(",\"replicas\":{");
                boolean firstReplica = true;
                for (Map.Entry<TopicPartition, ReplicaInfo> r : d.replicaInfos().entrySet()) {
                    if (!firstReplica) sb.append(',');
                    firstReplica = false;
                    sb.append(q(r.getKey().toString())).append(':').append(r.getValue().size());
                }
                sb.append("}}");
            }
            OUT.println(sb.append("}}"));
        }
        return 0;
    }

    static int producers(String bootstrap, String topic, int partition) throws Exception {
        TopicPartition tp = new TopicPartition(topic, partition);
        try (Admin admin = admin(bootstrap)) {
            DescribeProducersResult.PartitionProducerState state = admin.describeProducers(List.of(tp))
                .partitionResult(tp).get(OP_TIMEOUT_S, TimeUnit.SECONDS);
            StringBuilder sb = new StringBuilder("{\"producers\":[");
            boolean first = true;
            for (ProducerState p : state.activeProducers()) {
                if (!first) sb.append(',');
                first = false;
                sb.append("{\"id\":").append(p.producerId()).append(",\"epoch\":").append(p.producerEpoch())
                    .append(",\"last_sequence\":").append(p.lastSequence())
                    .append(",\"last_timestamp\":").append(p.lastTimestamp())
                    .append(",\"txn_start\":").append(p.currentTransactionStartOffset().isPresent()).append('}');
            }
            OUT.println(sb.append("]}"));
        }
        return 0;
    }

    static int produce(String bootstrap, String topic, int count, int size) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, new byte[size])).get(OP_TIMEOUT_S, TimeUnit.SECONDS);
            }
        }
        OUT.println("{\"sent\":" + count + "}");
        return 0;
    }

    static String q(String s) {
        if (s == null) return "null";
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
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
