// Consumer-group driver for klamm's interop tests, on the Apache Kafka Java client
// (classic group protocol).  Output is JSON, one object per line, on stdout.
//
//   group <bootstrap> <topic> <group> <assignor> <members> <records> [static]
//       assignor: range | roundrobin | sticky | cooperative-sticky
//       Runs <members> subscribed consumers (one thread each, commitSync after
//       every poll that returned records).  Prints
//         {"phase":"joined","assignments":[[p..],..]}      all members hold disjoint partitions covering the topic
//         {"phase":"after-leave","assignments":[..]}      member 0 closed (LeaveGroup), the rest cover the topic
//         {"phase":"done","consumed":n,"distinct":d}       every one of <records> records was consumed
//       With "static", member i has group.instance.id "<group>-i".
//   batch
//       one admin command per line on stdin, each framed by {"batch":n} ... {"batch_end":n,"rc":rc}:
//     admin-list-groups <bootstrap>
//     admin-describe-group <bootstrap> <group>
//     admin-list-offsets <bootstrap> <group>
//     admin-alter-offsets <bootstrap> <group> <topic> <partition>=<offset> ...
//     admin-delete-offsets <bootstrap> <group> <topic> <partition> ...
//     admin-delete-group <bootstrap> <group>
//   Kafka API errors print {"error":"<ExceptionSimpleName>","message":...} and return rc 3.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class GroupClient {
    static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    static final long OP_TIMEOUT_S = 30;
    static final long PHASE_TIMEOUT_MS = 60_000;

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

    static int run(String[] a) {
        try {
            switch (a[0]) {
                case "group": return group(a);
                case "admin-list-groups": return listGroups(a[1]);
                case "admin-describe-group": return describeGroup(a[1], a[2]);
                case "admin-list-offsets": return listOffsets(a[1], a[2]);
                case "admin-alter-offsets": return alterOffsets(a);
                case "admin-delete-offsets": return deleteOffsets(a);
                case "admin-delete-group": return deleteGroup(a[1], a[2]);
                default:
                    OUT.println("{\"error\":\"Usage\",\"message\":" + q("unknown command " + a[0]) + "}");
                    return 2;
            }
        } catch (ExecutionException e) {
            Throwable c = e.getCause() == null ? e : e.getCause();
            OUT.println("{\"error\":" + q(c.getClass().getSimpleName()) + ",\"message\":" + q(String.valueOf(c.getMessage())) + "}");
            return 3;
        } catch (Exception e) {
            OUT.println("{\"error\":" + q(e.getClass().getSimpleName()) + ",\"message\":" + q(String.valueOf(e.getMessage())) + "}");
            e.printStackTrace();
            return 1;
        }
    }

    // ------------------------------------------------------------------ group
    static String assignorClass(String name) {
        switch (name) {
            case "range": return "org.apache.kafka.clients.consumer.RangeAssignor";
            case "roundrobin": return "org.apache.kafka.clients.consumer.RoundRobinAssignor";
            case "sticky": return "org.apache.kafka.clients.consumer.StickyAssignor";
            case "cooperative-sticky": return "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
            default: throw new IllegalArgumentException("unknown assignor " + name);
        }
    }

    static final class Member implements Runnable {
        final KafkaConsumer<byte[], byte[]> consumer;
        final String topic;
        final AtomicBoolean stop = new AtomicBoolean();
        final Map<Integer, Set<Integer>> assignments;
        final Set<String> consumed;
        final AtomicLong total;
        final int index;
        volatile Throwable failure;
        final Thread thread = new Thread(this);

        Member(int index, Properties props, String topic, Map<Integer, Set<Integer>> assignments, Set<String> consumed, AtomicLong total) {
            this.index = index;
            this.consumer = new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
            this.topic = topic;
            this.assignments = assignments;
            this.consumed = consumed;
            this.total = total;
        }

        public void run() {
            try {
                consumer.subscribe(List.of(topic));
                while (!stop.get()) {
                    ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        consumed.add(r.partition() + ":" + r.offset());
                        total.incrementAndGet();
                    }
                    if (!records.isEmpty()) {
                        try {
                            consumer.commitSync();
                        } catch (RebalanceInProgressException e) {
                            // A cooperative rebalance began after this poll: the next poll completes it, and the
                            // records of partitions this member keeps are committed with the next ones (Kafka's
                            // documented way; their redelivery elsewhere is counted once in `consumed`).
                        }
                    }
                    Set<Integer> mine = new TreeSet<>();
                    for (TopicPartition tp : consumer.assignment()) mine.add(tp.partition());
                    assignments.put(index, mine);
                }
            } catch (Throwable t) {
                failure = t;
                t.printStackTrace();
            } finally {
                assignments.remove(index);
                consumer.close(Duration.ofSeconds(10));
            }
        }
    }

    static int group(String[] a) throws Exception {
        String bs = a[1], topic = a[2], group = a[3], assignor = a[4];
        int members = Integer.parseInt(a[5]);
        long records = Long.parseLong(a[6]);
        boolean isStatic = a.length > 7 && a[7].equals("static");
        Map<Integer, Set<Integer>> assignments = new ConcurrentHashMap<>();
        Set<String> consumed = ConcurrentHashMap.newKeySet();
        AtomicLong total = new AtomicLong();
        int partitions;
        try (Admin admin = admin(bs)) {
            partitions = admin.describeTopics(List.of(topic)).allTopicNames().get(OP_TIMEOUT_S, TimeUnit.SECONDS)
                    .get(topic).partitions().size();
        }
        List<Member> all = new ArrayList<>();
        for (int i = 0; i < members; i++) {
            Properties p = new Properties();
            p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bs);
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            p.put(ConsumerConfig.CLIENT_ID_CONFIG, group + "-" + i);
            p.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, assignorClass(assignor));
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
            p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "5");
            if (isStatic) p.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, group + "-" + i);
            Member m = new Member(i, p, topic, assignments, consumed, total);
            all.add(m);
            m.thread.start();
        }
        try {
            awaitCover(assignments, all, partitions, members, "joined");
            Member first = all.get(0);
            first.stop.set(true);
            first.thread.join(20_000);
            awaitCover(assignments, all.subList(1, members), partitions, members - 1, "after-leave");
            long deadline = System.currentTimeMillis() + PHASE_TIMEOUT_MS;
            while (consumed.size() < records && System.currentTimeMillis() < deadline) Thread.sleep(50);
            OUT.println("{\"phase\":\"done\",\"consumed\":" + total.get() + ",\"distinct\":" + consumed.size() + "}");
        } finally {
            for (Member m : all) m.stop.set(true);
            for (Member m : all) m.thread.join(20_000);
        }
        for (Member m : all) {
            if (m.failure != null) throw new RuntimeException("member " + m.index + " failed", m.failure);
        }
        return consumed.size() >= records ? 0 : 4;
    }

    static void awaitCover(Map<Integer, Set<Integer>> assignments, List<Member> live, int partitions, int members,
                           String phase) throws Exception {
        long deadline = System.currentTimeMillis() + PHASE_TIMEOUT_MS;
        while (System.currentTimeMillis() < deadline) {
            List<Set<Integer>> snapshot = new ArrayList<>();
            Set<Integer> union = new HashSet<>();
            int sum = 0;
            for (Member m : live) {
                Set<Integer> s = assignments.get(m.index);
                if (s == null) break;
                snapshot.add(new TreeSet<>(s));
                union.addAll(s);
                sum += s.size();
            }
            boolean everyoneHasSome = snapshot.size() == members && snapshot.stream().allMatch(s -> !s.isEmpty());
            if (everyoneHasSome && union.size() == partitions && sum == partitions) {
                StringBuilder b = new StringBuilder("{\"phase\":" + q(phase) + ",\"assignments\":[");
                for (int i = 0; i < snapshot.size(); i++) b.append(i > 0 ? "," : "").append(snapshot.get(i));
                OUT.println(b.append("]}").toString().replace(" ", ""));
                return;
            }
            for (Member m : live) {
                if (m.failure != null) throw new RuntimeException("member " + m.index + " failed", m.failure);
            }
            Thread.sleep(50);
        }
        throw new RuntimeException("timed out waiting for phase " + phase + ": " + assignments);
    }

    // ------------------------------------------------------------------ admin
    static Admin admin(String bs) {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bs);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        return Admin.create(p);
    }

    static int listGroups(String bs) throws Exception {
        try (Admin admin = admin(bs)) {
            Collection<ConsumerGroupListing> groups = admin.listConsumerGroups().all().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
            StringBuilder b = new StringBuilder("{\"groups\":[");
            int i = 0;
            for (ConsumerGroupListing g : groups) {
                b.append(i++ > 0 ? "," : "").append("{\"groupId\":").append(q(g.groupId()))
                 .append(",\"state\":").append(q(g.state().map(Object::toString).orElse("")))
                 .append(",\"simple\":").append(g.isSimpleConsumerGroup()).append("}");
            }
            OUT.println(b.append("]}"));
        }
        return 0;
    }

    static int describeGroup(String bs, String group) throws Exception {
        try (Admin admin = admin(bs)) {
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all()
                    .get(OP_TIMEOUT_S, TimeUnit.SECONDS).get(group);
            StringBuilder b = new StringBuilder("{\"groupId\":" + q(d.groupId()) + ",\"state\":" + q(String.valueOf(d.state()))
                    + ",\"assignor\":" + q(d.partitionAssignor()) + ",\"simple\":" + d.isSimpleConsumerGroup()
                    + ",\"coordinator\":" + (d.coordinator() == null ? -1 : d.coordinator().id()) + ",\"members\":[");
            int i = 0;
            for (MemberDescription m : d.members()) {
                List<String> parts = new ArrayList<>();
                for (TopicPartition tp : m.assignment().topicPartitions()) parts.add(q(tp.topic() + "-" + tp.partition()));
                parts.sort(null);
                b.append(i++ > 0 ? "," : "").append("{\"memberId\":").append(q(m.consumerId()))
                 .append(",\"clientId\":").append(q(m.clientId())).append(",\"host\":").append(q(m.host()))
                 .append(",\"instanceId\":").append(q(m.groupInstanceId().orElse("")))
                 .append(",\"assignment\":").append(parts).append("}");
            }
            OUT.println(b.append("]}").toString());
        }
        return 0;
    }

    static int listOffsets(String bs, String group) throws Exception {
        try (Admin admin = admin(bs)) {
            Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
            StringBuilder b = new StringBuilder("{\"offsets\":{");
            int i = 0;
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
                if (e.getValue() == null) continue;
                b.append(i++ > 0 ? "," : "").append(q(e.getKey().topic() + "-" + e.getKey().partition()))
                 .append(":").append(e.getValue().offset());
            }
            OUT.println(b.append("}}"));
        }
        return 0;
    }

    static int alterOffsets(String[] a) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (int i = 4; i < a.length; i++) {
            String[] kv = a[i].split("=");
            offsets.put(new TopicPartition(a[3], Integer.parseInt(kv[0])), new OffsetAndMetadata(Long.parseLong(kv[1])));
        }
        try (Admin admin = admin(a[1])) {
            admin.alterConsumerGroupOffsets(a[2], offsets).all().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
        }
        OUT.println("{\"altered\":" + offsets.size() + "}");
        return 0;
    }

    static int deleteOffsets(String[] a) throws Exception {
        Set<TopicPartition> parts = new HashSet<>();
        for (int i = 4; i < a.length; i++) parts.add(new TopicPartition(a[3], Integer.parseInt(a[i])));
        try (Admin admin = admin(a[1])) {
            admin.deleteConsumerGroupOffsets(a[2], parts).all().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
        }
        OUT.println("{\"deleted\":" + parts.size() + "}");
        return 0;
    }

    static int deleteGroup(String bs, String group) throws Exception {
        try (Admin admin = admin(bs)) {
            admin.deleteConsumerGroups(List.of(group)).all().get(OP_TIMEOUT_S, TimeUnit.SECONDS);
        }
        OUT.println("{\"deletedGroup\":" + q(group) + "}");
        return 0;
    }

    static String q(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }
}
