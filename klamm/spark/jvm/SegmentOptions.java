package klamm.spark.jvm;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Pattern;

import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/** The options of format("klamm-segments"), read as klamm.spark.segments.segment_options reads them. */
final class SegmentOptions implements Serializable {
    private static final long serialVersionUID = 1L;
    // Spark's Kafka row schema, built without Spark's SQL parser, which takes a second to warm up in a new JVM
    private static final StructType SCHEMA = new StructType()
        .add("key", DataTypes.BinaryType).add("value", DataTypes.BinaryType).add("topic", DataTypes.StringType)
        .add("partition", DataTypes.IntegerType).add("offset", DataTypes.LongType)
        .add("timestamp", DataTypes.TimestampType).add("timestampType", DataTypes.IntegerType);
    private static final StructType WITH_HEADERS = SCHEMA.add("headers", DataTypes.createArrayType(
        new StructType().add("key", DataTypes.StringType).add("value", DataTypes.BinaryType)));

    final List<String> logDirs = new ArrayList<>();
    final List<String> topics = new ArrayList<>();
    final Pattern pattern;
    final boolean readCommitted;

    /** `options` with lower-case keys (Spark's CaseInsensitiveStringMap). */
    SegmentOptions(Map<String, String> options) {
        String path = options.get("path");
        if (path == null || path.isEmpty()) {
            throw new IllegalArgumentException(
                "give the broker's log.dirs: spark.read.format(\"klamm-segments\").load(\"<log.dirs>\")");
        }
        String isolation = options.getOrDefault("kafka.isolation.level", "read_committed").strip()
            .toLowerCase(Locale.ROOT);
        if (!isolation.equals("read_committed") && !isolation.equals("read_uncommitted")) {
            throw new IllegalArgumentException(
                "kafka.isolation.level must be read_committed or read_uncommitted, not '" + isolation + "'");
        }
        split(path, logDirs);
        String subscribe = options.get("subscribe");
        if (subscribe != null) {
            split(subscribe, topics);
        }
        String regex = options.get("subscribepattern");
        pattern = regex == null ? null : Pattern.compile(regex);
        readCommitted = isolation.equals("read_committed");
    }

    static boolean includeHeaders(Map<String, String> options) {
        return options.getOrDefault("includeheaders", "false").strip().toLowerCase(Locale.ROOT).equals("true");
    }

    /** Spark's Kafka row schema, with `headers` when includeHeaders asks for it. */
    static StructType schema(boolean includeHeaders) {
        return includeHeaders ? WITH_HEADERS : SCHEMA;
    }

    boolean matches(String topic) {
        if (!topics.isEmpty()) {
            return topics.contains(topic);
        }
        if (pattern != null) {
            return pattern.matcher(topic).matches();
        }
        return !topic.startsWith("__");
    }

    private static void split(String value, List<String> into) {
        for (String part : value.split(",")) {
            if (!part.strip().isEmpty()) {
                into.add(part.strip());
            }
        }
    }
}
