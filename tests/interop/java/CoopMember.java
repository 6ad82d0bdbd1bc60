// One group member on the Apache Kafka Java client, for tests/interop/ownership.py: a classic consumer with
// CooperativeStickyAssignor (or group.protocol=consumer) that commits synchronously, in its revoke callback,
// the positions of the partitions it gives up, and never otherwise.
//
//   CoopMember <bootstrap> <topic> <group> <classic|consumer> <client.id> [<key>=<value> ...]
//
// <topic> "re:<regex>" subscribes to a pattern; trailing arguments are more consumer properties
// (group.remote.assignor=range, ...).
//
// Prints JSON lines on stdout, each stamped with the wall clock in microseconds ("t"):
//   {"ev":"assigned","t":..,"p":[..]}   {"ev":"revoked","t":..,"p":[..],"commit":"ok"|"<error>"}
//   {"ev":"lost","t":..,"p":[..]}       {"ev":"rec","t":..,"p":..,"o":..}      {"ev":"closed","t":..}
// (with the topic too: "tp":["<topic>-<partition>",..] beside "p", and "topic" in "rec").
// A line "close" on stdin closes the consumer (revoking, so committing, what it holds) and exits; a line
// "pause <ms>" stops polling that long (past max.poll.interval.ms, the member leaves the group), then
// prints {"ev":"resumed","t":..} and polls on.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class CoopMember {
    static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    static long micros() {
        Instant now = Instant.now();
        return now.getEpochSecond() * 1_000_000L + now.getNano() / 1_000;
    }

    static String partitions(Collection<TopicPartition> parts) {
        return parts.stream().map(tp -> Integer.toString(tp.partition())).sorted()
                .collect(Collectors.joining(",", "[", "]"))
               + ",\"tp\":" + parts.stream().map(tp -> quote(tp.topic() + "-" + tp.partition())).sorted()
                .collect(Collectors.joining(",", "[", "]"));
    }

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", " ") + "\"";
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2], protocol = args[3], clientId = args[4];
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.METADATA_MAX_AGE_CONFIG, "1000");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        if (protocol.equals("classic")) {
            props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
                      "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");
            props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
            props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "500");
        }
        for (int i = 5; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }
        AtomicBoolean closing = new AtomicBoolean(false);
        AtomicLong pauseMs = new AtomicLong(0);
        Thread stdin = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null && !line.trim().equals("close")) {
                    if (line.startsWith("pause ")) pauseMs.set(Long.parseLong(line.substring(6).trim()));
                }
            } catch (Exception e) { }
            closing.set(true);
        });
        stdin.setDaemon(true);
        stdin.start();

        Map<TopicPartition, Long> positions = new HashMap<>();
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);
        ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                OUT.println("{\"ev\":\"assigned\",\"t\":" + micros() + ",\"p\":" + partitions(parts) + "}");
            }

            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (TopicPartition tp : parts) {
                    Long position = positions.remove(tp);
                    if (position != null) offsets.put(tp, new OffsetAndMetadata(position));
                }
                String result = "ok";
                try {
                    if (!offsets.isEmpty()) consumer.commitSync(offsets);
                } catch (Exception e) {
                    result = e.getClass().getSimpleName() + ": " + e.getMessage();
                }
                OUT.println("{\"ev\":\"revoked\",\"t\":" + micros() + ",\"p\":" + partitions(parts)
                            + ",\"commit\":" + quote(result) + "}");
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> parts) {
                for (TopicPartition tp : parts) positions.remove(tp);
                OUT.println("{\"ev\":\"lost\",\"t\":" + micros() + ",\"p\":" + partitions(parts) + "}");
            }
        };
        if (topic.startsWith("re:")) consumer.subscribe(Pattern.compile(topic.substring(3)), listener);
        else consumer.subscribe(List.of(topic), listener);
        while (!closing.get()) {
            long pause = pauseMs.getAndSet(0);
            if (pause > 0) {
                Thread.sleep(pause);
                OUT.println("{\"ev\":\"resumed\",\"t\":" + micros() + "}");
            }
            for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(50))) {
                OUT.println("{\"ev\":\"rec\",\"t\":" + micros() + ",\"p\":" + r.partition() + ",\"o\":" + r.offset()
                            + ",\"topic\":" + quote(r.topic()) + "}");
                positions.put(new TopicPartition(r.topic(), r.partition()), r.offset() + 1);
            }
        }
        consumer.close();
        OUT.println("{\"ev\":\"closed\",\"t\":" + micros() + "}");
    }
}
