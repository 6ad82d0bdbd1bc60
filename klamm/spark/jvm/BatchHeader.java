package klamm.spark.jvm;

import java.io.IOException;
import java.nio.ByteBuffer;

/** The 61-byte header of a v2 record batch, as klamm.protocol.batch reads it. */
final class BatchHeader {
    static final int SIZE = 61;
    static final int LOG_OVERHEAD = 12;
    static final int ATTR_COMPRESSION = 0x07;
    static final int ATTR_TIMESTAMP_TYPE = 0x08;
    static final int ATTR_TRANSACTIONAL = 0x10;
    static final int ATTR_CONTROL = 0x20;

    final long position;
    final long baseOffset;
    final int batchLength;
    final int attributes;
    final int lastOffsetDelta;
    final long baseTimestamp;
    final long maxTimestamp;
    final long producerId;
    final int recordsCount;

    private BatchHeader(long position, ByteBuffer buf, int at) {
        this.position = position;
        baseOffset = buf.getLong(at);
        batchLength = buf.getInt(at + 8);
        attributes = buf.getShort(at + 21) & 0xffff;
        lastOffsetDelta = buf.getInt(at + 23);
        baseTimestamp = buf.getLong(at + 27);
        maxTimestamp = buf.getLong(at + 35);
        producerId = buf.getLong(at + 43);
        recordsCount = buf.getInt(at + 57);
    }

    /** The header at buf[at..], the batch lying at file `position`; InvalidBatch where it cannot be one. */
    static BatchHeader read(ByteBuffer buf, int at, long position) throws InvalidBatch {
        if (buf.limit() - at < SIZE) {
            throw new InvalidBatch("truncated batch header at " + position);
        }
        if (buf.get(at + 16) != 2) {
            throw new InvalidBatch("unsupported magic " + buf.get(at + 16) + " at " + position);
        }
        BatchHeader header = new BatchHeader(position, buf, at);
        if (header.batchLength < SIZE - LOG_OVERHEAD) {
            throw new InvalidBatch("batch length " + header.batchLength + " too small at " + position);
        }
        if (header.lastOffsetDelta < 0 || header.recordsCount < 0) {
            throw new InvalidBatch("negative record count or offset delta at " + position);
        }
        return header;
    }

    int size() {
        return batchLength + LOG_OVERHEAD;
    }

    long nextOffset() {
        return baseOffset + lastOffsetDelta + 1;
    }

    long lastOffset() {
        return baseOffset + lastOffsetDelta;
    }

    int compression() {
        return attributes & ATTR_COMPRESSION;
    }

    boolean isControl() {
        return (attributes & ATTR_CONTROL) != 0;
    }

    boolean isTransactional() {
        return (attributes & ATTR_TRANSACTIONAL) != 0;
    }

    boolean logAppendTime() {
        return (attributes & ATTR_TIMESTAMP_TYPE) != 0;
    }

    /** A batch that cannot be read: a torn tail where the planner meets it, a corrupt file where a reader does. */
    static final class InvalidBatch extends IOException {
        private static final long serialVersionUID = 1L;

        InvalidBatch(String message) {
            super(message);
        }
    }
}
