// Benchmark driver for the Java Kafka client (kafka-clients 3.9.x).
//
// Usage: java -cp <jars>:<classes> KlammBench <mode> key=value ...
//   modes: produce | consume | latency
//   common keys: bootstrap=HOST:PORT topic=NAME
//   produce: records=N size=BYTES acks=1|all [producers=P partitions=N]
//   consume: expect=N            (reads partition 0 from offset 0 until N records)
//   latency: records=N size=BYTES interval_us=1000 acks=1 warmup=500 [fetch_wait_ms=N]
//
// Prints exactly one JSON line on stdout with the measurement (or {"ok":false,...}).
// Client settings are fixed here so that every broker sees the same client.

import java.time.Duration;
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class KlammBench {
    static Map<String, String> args = new HashMap<>();

    static String arg(String k, String def) {
        String v = args.get(k);
        if (v == null) {
            if (def == null) throw new IllegalArgumentException("missing argument " + k);
            return def;
        }
        return v;
    }

    static long argLong(String k, long def) {
        return Long.parseLong(arg(k, Long.toString(def)));
    }

    public static void main(String[] argv) {
        if (argv.length < 1) {
            System.err.println("usage: KlammBench produce|consume|latency key=value...");
            System.exit(2);
        }
        for (int i = 1; i < argv.length; i++) {
            int eq = argv[i].indexOf('=');
            if (eq < 0) throw new IllegalArgumentException("bad argument " + argv[i]);
            args.put(argv[i].substring(0, eq), argv[i].substring(eq + 1));
        }
        String out;
        try {
            switch (argv[0]) {
                case "produce": out = produce(); break;
                case "consume": out = consume(); break;
                case "latency": out = latency(); break;
                default: throw new IllegalArgumentException("unknown mode " + argv[0]);
            }
        } catch (Throwable t) {
            t.printStackTrace();
            out = "{\"ok\":false,\"error\":" + jstr(t.toString()) + "}";
        }
        System.out.println(out);
        System.out.flush();
        System.exit(0);
    }

    static String jstr(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static Properties producerProps(String acks, int lingerMs) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, arg("bootstrap", null));
        p.put(ProducerConfig.ACKS_CONFIG, acks);
        p.put(ProducerConfig.LINGER_MS_CONFIG, Integer.toString(lingerMs));
        // Same batching as librdkafka's defaults (batch.size=1000000, linger.ms=5).
        p.put(ProducerConfig.BATCH_SIZE_CONFIG, "1000000");
        p.put(ProducerConfig.BUFFER_MEMORY_CONFIG, Long.toString(64L * 1024 * 1024));
        p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "none");
        // librdkafka does not enable idempotence by default; keep both clients alike.
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        return p;
    }

    static Properties consumerProps() {
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, arg("bootstrap", null));
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "10000");
        if (args.containsKey("fetch_wait_ms")) p.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, args.get("fetch_wait_ms"));
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return p;
    }

    static String produce() throws Exception {
        String topic = arg("topic", null);
        long n = argLong("records", 0);
        int size = (int) argLong("size", 100);
        String acks = arg("acks", "1");
        byte[] value = new byte[size];
        new Random(42).nextBytes(value);
        AtomicLong errors = new AtomicLong();
        AtomicReference<String> firstError = new AtomicReference<>();
        Callback cb = (md, e) -> {
            if (e != null) {
                errors.incrementAndGet();
                firstError.compareAndSet(null, e.toString());
            }
        };
        // producers=P partitions=N: P clients (one connection each) take the records in turn, each spreading
        // its share over partitions 0..N-1 (the many-small-requests row).
        int clients = (int) argLong("producers", 1);
        int partitions = (int) argLong("partitions", 1);
        List<KafkaProducer<byte[], byte[]>> producers = new ArrayList<>();
        try {
            for (int c = 0; c < clients; c++) {
                KafkaProducer<byte[], byte[]> producer =
                    new KafkaProducer<>(producerProps(acks, (int) argLong("linger_ms", 5)));
                producers.add(producer);
                producer.partitionsFor(topic);  // fetch metadata before starting the clock
            }
            long t0 = System.nanoTime();
            for (long i = 0; i < n; i++) {
                int partition = (int) ((i / clients) % partitions);
                producers.get((int) (i % clients)).send(new ProducerRecord<>(topic, partition, null, value), cb);
            }
            for (KafkaProducer<byte[], byte[]> producer : producers) producer.flush();
            double secs = (System.nanoTime() - t0) / 1e9;
            return String.format(Locale.ROOT,
                "{\"ok\":%s,\"mode\":\"produce\",\"records\":%d,\"bytes\":%d,\"seconds\":%.6f,\"errors\":%d,\"first_error\":%s,\"client_metrics\":%s}",
                errors.get() == 0 ? "true" : "false", n, n * size, secs, errors.get(),
                firstError.get() == null ? "null" : jstr(firstError.get()), producerMetrics(producers.get(0)));
        } finally {
            for (KafkaProducer<byte[], byte[]> producer : producers) producer.close();
        }
    }

    /** The first producer's batching as its own metrics report it: what each request the broker handled carried. */
    static String producerMetrics(KafkaProducer<byte[], byte[]> producer) {
        Set<String> wanted = Set.of("batch-size-avg", "records-per-request-avg", "request-total", "request-latency-avg");
        StringBuilder out = new StringBuilder("{");
        for (Map.Entry<MetricName, ? extends Metric> e : producer.metrics().entrySet()) {
            MetricName name = e.getKey();
            if (!name.group().equals("producer-metrics") || !wanted.contains(name.name())) continue;
            Object v = e.getValue().metricValue();
            if (out.length() > 1) out.append(',');
            out.append(jstr(name.name())).append(':')
               .append(v instanceof Number ? String.format(Locale.ROOT, "%.1f", ((Number) v).doubleValue()) : "null");
        }
        return out.append('}').toString();
    }

    static String consume() throws Exception {
        String topic = arg("topic", null);
        long expect = argLong("expect", 0);
        long timeoutMs = argLong("timeout_ms", 600000);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerProps())) {
            consumer.assign(List.of(tp));
            // The end offset is only informational (Tansu 0.6 under-reports it); with
            // expect=N the consumer reads until N records arrived or it times out.
            long end = consumer.endOffsets(List.of(tp), Duration.ofSeconds(30)).get(tp);
            long target = expect > 0 ? expect : end;
            consumer.seek(tp, 0);
            long count = 0, bytes = 0;
            long t0 = System.nanoTime();
            long deadline = t0 + timeoutMs * 1_000_000L;
            while (count < target) {
                ConsumerRecords<byte[], byte[]> recs = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<byte[], byte[]> r : recs) {
                    count++;
                    if (r.value() != null) bytes += r.value().length;
                }
                if (System.nanoTime() > deadline) break;
            }
            double secs = (System.nanoTime() - t0) / 1e9;
            return String.format(Locale.ROOT,
                "{\"ok\":%s,\"mode\":\"consume\",\"records\":%d,\"bytes\":%d,\"seconds\":%.6f,\"expected\":%d,\"end_offset\":%d,\"error\":%s}",
                count >= target ? "true" : "false", count, bytes, secs, target, end,
                count >= target ? "null" : jstr("read " + count + " of " + target + " records before the timeout"));
        }
    }

    static String latency() throws Exception {
        String topic = arg("topic", null);
        int n = (int) argLong("records", 5000);
        int size = Math.max(16, (int) argLong("size", 100));
        long intervalNs = argLong("interval_us", 1000) * 1000L;
        long timeoutMs = argLong("timeout_ms", 120000);
        TopicPartition tp = new TopicPartition(topic, 0);
        long[] lat = new long[n];
        AtomicInteger received = new AtomicInteger();
        CountDownLatch warm = new CountDownLatch(1);
        AtomicBoolean stop = new AtomicBoolean();
        AtomicReference<Throwable> consumerError = new AtomicReference<>();

        Thread consumerThread = new Thread(() -> {
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerProps())) {
                consumer.assign(List.of(tp));
                consumer.seek(tp, 0);
                while (!stop.get() && received.get() < n) {
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                        long now = System.nanoTime();
                        byte[] v = r.value();
                        long seq = readLong(v, 0), ts = readLong(v, 8);
                        if (seq < 0) { warm.countDown(); continue; }
                        if (seq < n) lat[(int) seq] = now - ts;
                        received.incrementAndGet();
                    }
                }
            } catch (Throwable t) {
                consumerError.set(t);
            }
        });
        consumerThread.start();

        long errors;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps(arg("acks", "1"), 0))) {
            // Warm-up record: establishes both connections before the clock starts.
            byte[] w = new byte[size];
            writeLong(w, 0, -1);
            producer.send(new ProducerRecord<>(topic, 0, null, w)).get(30, TimeUnit.SECONDS);
            if (!warm.await(30, TimeUnit.SECONDS)) throw new RuntimeException("warm-up record never consumed");
            AtomicLong errs = new AtomicLong();
            // Then `warmup` paced records that are not measured (connections, JIT, caches).
            int warmup = (int) argLong("warmup", 500);
            long start = System.nanoTime() + warmup * intervalNs;
            startEpochMs = System.currentTimeMillis() + warmup * intervalNs / 1_000_000;
            for (int i = -warmup; i < n; i++) {
                long due = start + i * intervalNs;
                long now;
                while ((now = System.nanoTime()) < due) {
                    long left = due - now;
                    if (left > 200_000) LockSupport.parkNanos(left - 100_000);
                    else Thread.onSpinWait();
                }
                byte[] v = new byte[size];
                writeLong(v, 0, i);
                writeLong(v, 8, System.nanoTime());
                producer.send(new ProducerRecord<>(topic, 0, null, v), (md, e) -> { if (e != null) errs.incrementAndGet(); });
            }
            producer.flush();
            errors = errs.get();
        }
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (received.get() < n && consumerError.get() == null && System.currentTimeMillis() < deadline) {
            Thread.sleep(10);
        }
        stop.set(true);
        consumerThread.join(10000);
        if (consumerError.get() != null) throw new RuntimeException(consumerError.get());
        int got = received.get();
        long[] s = Arrays.copyOf(lat, n);
        Arrays.sort(s);
        // Only records actually received count; missing ones are left at 0 and dropped.
        int missing = n - got;
        long[] v = Arrays.copyOfRange(s, Math.max(0, missing), n);
        if (v.length == 0) return "{\"ok\":false,\"error\":\"no records received\"}";
        double sum = 0;
        for (long x : v) sum += x;
        return String.format(Locale.ROOT,
            "{\"ok\":%s,\"mode\":\"latency\",\"records\":%d,\"received\":%d,\"errors\":%d,"
                + "\"p50_ms\":%.4f,\"p99_ms\":%.4f,\"p999_ms\":%.4f,\"max_ms\":%.4f,\"mean_ms\":%.4f,"
                + "\"start_epoch_ms\":%d,\"slow_bursts\":%s}",
            got == n && errors == 0 ? "true" : "false", n, got, errors,
            pct(v, 50) / 1e6, pct(v, 99) / 1e6, pct(v, 99.9) / 1e6, v[v.length - 1] / 1e6, sum / v.length / 1e6,
            startEpochMs, slowBursts(lat, 10_000_000L, 20));
    }

    static long startEpochMs;

    /** Runs of consecutive records slower than `overNs`, as [first seq, records, worst ms], at most `most` of
     * them: with one record a millisecond, a run starting at seq s is a hold-up s ms after start_epoch_ms. */
    static String slowBursts(long[] lat, long overNs, int most) {
        StringBuilder out = new StringBuilder("[");
        int bursts = 0;
        for (int i = 0; i < lat.length && bursts < most; i++) {
            if (lat[i] <= overNs) continue;
            int first = i;
            long worst = 0;
            for (; i < lat.length && lat[i] > overNs; i++) worst = Math.max(worst, lat[i]);
            out.append(bursts++ == 0 ? "" : ",").append(String.format(Locale.ROOT, "[%d,%d,%.1f]", first, i - first,
                                                                        worst / 1e6));
        }
        return out.append("]").toString();
    }

    static double pct(long[] sorted, double p) {
        int idx = (int) Math.ceil(p / 100.0 * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, idx))];
    }

    static void writeLong(byte[] b, int off, long v) {
        for (int i = 7; i >= 0; i--) { b[off + i] = (byte) v; v >>>= 8; }
    }

    static long readLong(byte[] b, int off) {
        long v = 0;
        for (int i = 0; i < 8; i++) v = (v << 8) | (b[off + i] & 0xff);
        return v;
    }
}
