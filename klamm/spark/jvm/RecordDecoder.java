package klamm.spark.jvm;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.zip.GZIPInputStream;

import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import net.jpountz.lz4.LZ4FrameInputStream;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.xerial.snappy.Snappy;
import org.xerial.snappy.SnappyInputStream;

/**
 * The records of v2 batches appended to Spark's column vectors, in the row schema of Spark's Kafka source. The
 * layout, and what counts as malformed, are klamm.protocol.records' and klamm.spark.record_columns'. Keys, values
 * and header values are copied once, from the (decompressed) batch into the vectors.
 */
final class RecordDecoder {
    private static final byte[] XERIAL_MAGIC = {(byte) 0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
    private static final long MS_MIN = Long.MIN_VALUE / 1000 + 1;
    private static final long MS_MAX = Long.MAX_VALUE / 1000;

    private final WritableColumnVector[] columns;
    private final WritableColumnVector headers;
    private byte[] data;
    private int pos;
    private int limit;

    /**
     * `columns` in the row schema's order, null where the query does not read the column (topic and partition,
     * constant in a slice, are never written here); records are parsed and checked all the same.
     */
    RecordDecoder(WritableColumnVector[] columns) {
        this.columns = columns;
        this.headers = columns.length > 7 ? columns[7] : null;
    }

    /** Appends the records with offsets in [start, end) of the batch at batch[at..]; the number of rows added. */
    int append(byte[] batch, int at, BatchHeader header, long start, long end) throws IOException {
        int recordsAt = at + BatchHeader.SIZE;
        int recordsLength = header.size() - BatchHeader.SIZE;
        if (header.compression() == 0) {
            data = batch;
            pos = recordsAt;
            limit = recordsAt + recordsLength;
        } else {
            data = decompress(header.compression(), batch, recordsAt, recordsLength);
            pos = 0;
            limit = data.length;
        }
        int rows = 0;
        int timestampType = header.logAppendTime() ? 1 : 0;
        if (header.logAppendTime() && (header.maxTimestamp < MS_MIN || header.maxTimestamp > MS_MAX)) {
            throw corrupt("batch timestamp out of range");
        }
        for (int i = 0; i < header.recordsCount; i++) {
            if (pos >= limit) {
                throw corrupt("truncated record");
            }
            int length = varint();
            int recordEnd = pos + length;
            if (length < 0 || recordEnd > limit || recordEnd < pos) {
                throw corrupt("truncated record");
            }
            pos++; // attributes: unused
            long timestampDelta = varlong(recordEnd);
            long offset = header.baseOffset + varint(recordEnd);
            long timestamp = header.logAppendTime() ? header.maxTimestamp : header.baseTimestamp + timestampDelta;
            if (!header.logAppendTime() && (timestamp < MS_MIN || timestamp > MS_MAX
                    || (timestampDelta > 0 && timestamp < header.baseTimestamp)
                    || (timestampDelta < 0 && timestamp > header.baseTimestamp))) {
                throw corrupt("record timestamp out of range");
            }
            if (offset < 0) {
                throw corrupt("record offset out of range");
            }
            boolean wanted = offset >= start && offset < end;
            bytesField(columns[0], wanted, recordEnd);
            bytesField(columns[1], wanted, recordEnd);
            int headerCount = varint(recordEnd);
            if (headerCount < 0) {
                throw corrupt("invalid record header count " + headerCount);
            }
            if (wanted && headers != null) {
                headers(headers, headerCount, recordEnd);
            } else {
                for (int h = 0; h < headerCount; h++) {
                    skipBytes(recordEnd);
                    skipBytes(recordEnd);
                }
            }
            if (pos != recordEnd) {
                throw corrupt("malformed record: record size does not match its contents");
            }
            if (wanted) {
                if (columns[4] != null) {
                    columns[4].appendLong(offset);
                }
                if (columns[5] != null) {
                    columns[5].appendLong(timestamp * 1000);
                }
                rows++;
            }
        }
        if (pos != limit) {
            throw corrupt("batch has bytes after its last record");
        }
        if (columns[6] != null) {
            columns[6].appendInts(rows, timestampType);
        }
        return rows;
    }

    private void headers(WritableColumnVector column, int count, int recordEnd) throws IOException {
        column.appendArray(count);
        WritableColumnVector entries = column.arrayData();
        for (int h = 0; h < count; h++) {
            int keyLength = varint(recordEnd);
            if (keyLength < 0 || keyLength > recordEnd - pos) {
                throw corrupt("malformed record: header key of " + keyLength + " bytes");
            }
            javaString(entries.getChild(0), pos, keyLength);
            pos += keyLength;
            bytesField(entries.getChild(1), true, recordEnd);
            entries.appendStruct(false);
        }
    }

    /** A header key as Java's consumer makes it, new String(bytes, UTF_8), in the vector's UTF-8. */
    private void javaString(WritableColumnVector column, int at, int length) {
        for (int i = at; i < at + length; i++) {
            if (data[i] < 0) {
                byte[] utf8 = new String(data, at, length, StandardCharsets.UTF_8).getBytes(StandardCharsets.UTF_8);
                column.appendByteArray(utf8, 0, utf8.length);
                return;
            }
        }
        column.appendByteArray(data, at, length);
    }

    /** A length-prefixed key or value (null below 0 bytes), appended to `column` if `wanted`. */
    private void bytesField(WritableColumnVector column, boolean wanted, int recordEnd) throws IOException {
        int length = varint(recordEnd);
        if (length > recordEnd - pos) {
            throw corrupt("malformed record: field of " + length + " bytes");
        }
        if (wanted && column != null) {
            if (length < 0) {
                column.appendNull();
            } else {
                column.appendByteArray(data, pos, length);
            }
        }
        pos += Math.max(length, 0);
    }

    private void skipBytes(int recordEnd) throws IOException {
        int length = varint(recordEnd);
        if (length > recordEnd - pos) {
            throw corrupt("malformed record: field of " + length + " bytes");
        }
        pos += Math.max(length, 0);
    }

    private int varint() throws IOException {
        return varint(limit);
    }

    private int varint(int end) throws IOException {
        int raw = 0;
        for (int shift = 0; shift < 35; shift += 7) {
            if (pos >= end) {
                throw corrupt("malformed record: varint runs past the record");
            }
            byte b = data[pos++];
            raw |= (b & 0x7f) << shift;
            if (b >= 0) {
                return (raw >>> 1) ^ -(raw & 1);
            }
        }
        throw corrupt("malformed record: varint longer than 5 bytes");
    }

    private long varlong(int end) throws IOException {
        long raw = 0;
        for (int shift = 0; shift < 70; shift += 7) {
            if (pos >= end) {
                throw corrupt("malformed record: varint runs past the record");
            }
            byte b = data[pos++];
            raw |= (long) (b & 0x7f) << shift;
            if (b >= 0) {
                return (raw >>> 1) ^ -(raw & 1);
            }
        }
        throw corrupt("malformed record: varlong longer than 10 bytes");
    }

    static byte[] decompress(int codec, byte[] source, int at, int length) throws IOException {
        ByteArrayInputStream in = new ByteArrayInputStream(source, at, length);
        switch (codec) {
            case 1:
                return drain(new GZIPInputStream(in));
            case 2:
                if (length >= XERIAL_MAGIC.length && java.util.Arrays.equals(source, at, at + XERIAL_MAGIC.length,
                                                                               XERIAL_MAGIC, 0, XERIAL_MAGIC.length)) {
                    return drain(new SnappyInputStream(in));
                }
                byte[] out = new byte[Snappy.uncompressedLength(source, at, length)];
                Snappy.uncompress(source, at, length, out, 0);
                return out;
            case 3:
                return drain(new LZ4FrameInputStream(in));
            case 4:
                return drain(new ZstdInputStreamNoFinalizer(in));
            default:
                throw corrupt("unknown compression codec " + codec);
        }
    }

    private static byte[] drain(InputStream in) throws IOException {
        try (in) {
            return in.readAllBytes();
        }
    }

    static IOException corrupt(String message) {
        return new IOException("CORRUPT_MESSAGE: " + message);
    }
}
