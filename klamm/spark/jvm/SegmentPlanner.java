package klamm.spark.jvm;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * One slice per segment holding readable records, as klamm.spark.segments.plan makes them: batch headers are
 * scanned, records are not decoded. A partition's readable log ends at its last batch after a clean shutdown
 * (`.kafka_cleanshutdown`), otherwise at its recovery point; read_committed also stops at the first transaction
 * still open and skips aborted ones (`.txnindex`).
 */
final class SegmentPlanner {
    private static final Pattern SEGMENT_NAME = Pattern.compile("^(\\d{20})\\.log$");
    private static final Pattern DIR_NAME = Pattern.compile("^(.+)-(\\d+)$");
    private static final int TXN_ENTRY = 34;
    private static final int SCAN_CHUNK = 1 << 20;

    private SegmentPlanner() {
    }

    static List<SegmentSlice> plan(SegmentOptions options) {
        List<SegmentSlice> slices = new ArrayList<>();
        try {
            for (String name : options.logDirs) {
                Path logDir = Paths.get(name);
                if (!Files.isDirectory(logDir)) {
                    throw new IllegalArgumentException(logDir + " is not a directory");
                }
                boolean clean = Files.exists(logDir.resolve(".kafka_cleanshutdown"));
                Map<String, Long> recoveryPoints = checkpoint(logDir.resolve("recovery-point-offset-checkpoint"));
                Map<String, Long> logStarts = checkpoint(logDir.resolve("log-start-offset-checkpoint"));
                for (Path directory : sorted(logDir)) {
                    Matcher m = DIR_NAME.matcher(directory.getFileName().toString());
                    if (!Files.isDirectory(directory) || !m.matches() || !options.matches(m.group(1))) {
                        continue;
                    }
                    String topic = m.group(1);
                    int partition;
                    try {
                        partition = Integer.parseInt(m.group(2));
                    } catch (NumberFormatException e) {
                        continue; // not a partition's directory: partitions are int32
                    }
                    String key = topic + " " + partition;
                    Long endBound = clean ? null : recoveryPoints.getOrDefault(key, 0L);
                    slices.addAll(planPartition(directory, topic, partition, endBound,
                                                logStarts.getOrDefault(key, 0L), options.readCommitted));
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return slices;
    }

    private static List<Path> sorted(Path directory) throws IOException {
        try (Stream<Path> entries = Files.list(directory)) {
            return entries.sorted().toList();
        }
    }

    /** {"topic partition": offset} of an offset checkpoint file; empty if it is missing. */
    static Map<String, Long> checkpoint(Path path) throws IOException {
        Map<String, Long> offsets = new HashMap<>();
        List<String> lines;
        try {
            lines = Files.readAllLines(path, StandardCharsets.UTF_8);
        } catch (NoSuchFileException e) {
            return offsets;
        }
        for (String line : lines.subList(Math.min(2, lines.size()), lines.size())) {
            String[] fields = line.strip().split(" ");
            if (fields.length != 3) {
                throw new IOException(path + ": malformed entry " + line);
            }
            try {
                offsets.put(fields[0] + " " + Integer.parseInt(fields[1]), Long.parseLong(fields[2]));
            } catch (NumberFormatException e) {
                throw new IOException(path + ": malformed entry " + line, e);
            }
        }
        return offsets;
    }

    private record Span(Path path, long first, long next, long limit) {
    }

    static List<SegmentSlice> planPartition(Path directory, String topic, int partition, Long endBound,
                                            long logStart, boolean readCommitted) throws IOException {
        TreeMap<Long, Path> segments = segments(directory);
        List<Span> spans = new ArrayList<>();
        Map<Long, Long> openTransactions = new HashMap<>(); // producer id -> first offset, until its marker
        boolean done = false;
        for (Map.Entry<Long, Path> segment : segments.entrySet()) {
            long first = segment.getKey();
            long[] nextAndLimit = {first, 0};
            done = scan(segment.getValue(), endBound, openTransactions, nextAndLimit);
            spans.add(new Span(segment.getValue(), first, nextAndLimit[0], nextAndLimit[1]));
            if (done) {
                break;
            }
        }
        long end = spans.isEmpty() ? logStart : spans.get(spans.size() - 1).next();
        if (readCommitted) {
            for (long open : openTransactions.values()) {
                end = Math.min(end, open);
            }
        }
        long[][] aborted = readCommitted ? aborted(segments) : new long[3][0];
        List<SegmentSlice> slices = new ArrayList<>();
        for (Span span : spans) {
            long from = Math.max(span.first(), logStart);
            long to = Math.min(span.next(), end);
            if (to > from) {
                slices.add(slice(span, topic, partition, from, to, aborted));
            }
        }
        return slices;
    }

    private static SegmentSlice slice(Span span, String topic, int partition, long from, long to, long[][] aborted) {
        List<Integer> overlapping = new ArrayList<>();
        for (int i = 0; i < aborted[0].length; i++) {
            if (aborted[2][i] >= span.first() && aborted[1][i] < span.next()) {
                overlapping.add(i);
            }
        }
        long[][] kept = new long[3][overlapping.size()];
        for (int j = 0; j < overlapping.size(); j++) {
            for (int column = 0; column < 3; column++) {
                kept[column][j] = aborted[column][overlapping.get(j)];
            }
        }
        return new SegmentSlice(span.path().toString(), topic, partition, from, to, span.limit(), kept[0], kept[1],
                                kept[2]);
    }

    private static TreeMap<Long, Path> segments(Path directory) throws IOException {
        TreeMap<Long, Path> found = new TreeMap<>();
        for (Path path : sorted(directory)) {
            Matcher m = SEGMENT_NAME.matcher(path.getFileName().toString());
            if (m.matches()) {
                found.put(Long.parseLong(m.group(1)), path);
            }
        }
        return found;
    }

    /**
     * Walks the batch headers of one segment; nextAndLimit becomes the next offset after its last whole batch and
     * the file bytes up to it. True when the partition's readable log ends in this segment.
     */
    private static boolean scan(Path path, Long endBound, Map<Long, Long> openTransactions, long[] nextAndLimit)
            throws IOException {
        try (FileChannel channel = FileChannel.open(path, StandardOpenOption.READ)) {
            long size = channel.size();
            ByteBuffer buf = ByteBuffer.allocate(SCAN_CHUNK);
            long bufStart = 0;
            buf.limit(0);
            long position = 0;
            while (position < size) {
                if (position - bufStart + BatchHeader.SIZE > buf.limit()) {
                    buf.clear();
                    buf.limit((int) Math.min(SCAN_CHUNK, size - position));
                    readFully(channel, buf, position);
                    bufStart = position;
                }
                BatchHeader header;
                try {
                    header = BatchHeader.read(buf, (int) (position - bufStart), position);
                    if (position + header.size() > size) {
                        throw new BatchHeader.InvalidBatch("batch at " + position + " runs past the end");
                    }
                } catch (BatchHeader.InvalidBatch e) {
                    return true; // a torn or corrupt tail: the clean end is before it
                }
                if (endBound != null && header.nextOffset() > endBound) {
                    return true;
                }
                if (header.isTransactional()) {
                    if (header.isControl()) {
                        openTransactions.remove(header.producerId);
                    } else {
                        openTransactions.putIfAbsent(header.producerId, header.baseOffset);
                    }
                }
                position += header.size();
                nextAndLimit[0] = header.nextOffset();
                nextAndLimit[1] = position;
            }
        }
        return false;
    }

    static void readFully(FileChannel channel, ByteBuffer buf, long position) throws IOException {
        while (buf.hasRemaining()) {
            if (channel.read(buf, position + buf.position()) < 0) {
                throw new BatchHeader.InvalidBatch("file ends at " + (position + buf.position()));
            }
        }
        buf.flip();
    }

    /** The aborted transactions of every segment's `.txnindex`: producer ids, first offsets, last offsets. */
    private static long[][] aborted(TreeMap<Long, Path> segments) throws IOException {
        List<long[]> entries = new ArrayList<>();
        for (Path path : segments.values()) {
            String name = path.getFileName().toString();
            Path index = path.resolveSibling(name.substring(0, name.length() - 4) + ".txnindex");
            byte[] bytes;
            try {
                bytes = Files.readAllBytes(index);
            } catch (NoSuchFileException e) {
                continue;
            }
            ByteBuffer buf = ByteBuffer.wrap(bytes);
            for (int at = 0; at + TXN_ENTRY <= bytes.length && buf.getShort(at) == 0; at += TXN_ENTRY) {
                entries.add(new long[] {buf.getLong(at + 2), buf.getLong(at + 10), buf.getLong(at + 18)});
            }
        }
        long[][] columns = new long[3][entries.size()];
        for (int i = 0; i < entries.size(); i++) {
            for (int column = 0; column < 3; column++) {
                columns[column][i] = entries.get(i)[column];
            }
        }
        return columns;
    }
}
