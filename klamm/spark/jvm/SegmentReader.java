package klamm.spark.jvm;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Reads one segment slice into columnar batches: whole record batches at a time, until a columnar batch holds
 * ROWS rows. Markers, aborted batches and offsets outside the slice are left out, as klamm.spark.segments.read_slice
 * leaves them.
 */
final class SegmentReader implements PartitionReader<ColumnarBatch> {
    static final int ROWS = 4096;
    private static final int CHUNK = 1 << 20;

    private final SegmentSlice slice;
    private final FileChannel channel;
    private final WritableColumnVector[] columns; // by the row schema's index: those the query reads
    private final ColumnarBatch batch;
    private final RecordDecoder decoder;
    private byte[] chunk = new byte[CHUNK];
    private long chunkStart;
    private int chunkLength;
    private long position;
    private boolean done;

    /** A reader of `slice` into batches of the columns `schema` names (a subset of the row schema's). */
    SegmentReader(SegmentSlice slice, StructType schema) throws IOException {
        this.slice = slice;
        StructType all = SegmentOptions.schema(java.util.Arrays.asList(schema.fieldNames()).contains("headers"));
        columns = new WritableColumnVector[all.length()];
        ColumnVector[] vectors = new ColumnVector[schema.length()];
        for (int i = 0; i < vectors.length; i++) {
            int at = all.fieldIndex(schema.fields()[i].name());
            if (at == 2) {
                ConstantColumnVector topic = new ConstantColumnVector(ROWS, DataTypes.StringType);
                topic.setUtf8String(UTF8String.fromString(slice.topic));
                vectors[i] = topic;
            } else if (at == 3) {
                ConstantColumnVector partition = new ConstantColumnVector(ROWS, DataTypes.IntegerType);
                partition.setInt(slice.partition);
                vectors[i] = partition;
            } else {
                columns[at] = new OnHeapColumnVector(ROWS, all.fields()[at].dataType());
                vectors[i] = columns[at];
            }
        }
        batch = new ColumnarBatch(vectors);
        decoder = new RecordDecoder(columns);
        channel = FileChannel.open(Paths.get(slice.path), StandardOpenOption.READ); // last: nothing after it throws
    }

    @Override
    public boolean next() throws IOException {
        for (WritableColumnVector column : columns) {
            if (column != null) {
                column.reset();
            }
        }
        int rows = 0;
        while (rows < ROWS && !done) {
            rows += nextBatch();
        }
        batch.setNumRows(rows);
        return rows > 0;
    }

    /** The rows of the record batch at `position`, which moves past it; sets `done` at the slice's end. */
    private int nextBatch() throws IOException {
        if (position >= slice.limit) {
            done = true;
            return 0;
        }
        BatchHeader header = BatchHeader.read(buffered(BatchHeader.SIZE), (int) (position - chunkStart), position);
        if (position + header.size() > slice.limit) {
            throw RecordDecoder.corrupt("batch at " + position + " runs past " + slice.limit + " in " + slice.path);
        }
        long at = position;
        position += header.size();
        if (header.baseOffset >= slice.end) {
            done = true;
            return 0;
        }
        if (header.nextOffset() <= slice.start || header.isControl()
                || (header.isTransactional() && slice.aborted(header.producerId, header.baseOffset))) {
            return 0;
        }
        position = at;
        buffered(header.size());
        position += header.size();
        return decoder.append(chunk, (int) (at - chunkStart), header, slice.start, slice.end);
    }

    /** The chunk, holding at least `length` bytes from `position` (or up to the slice's end). */
    private ByteBuffer buffered(int length) throws IOException {
        if (position + length > chunkStart + chunkLength) {
            if (length > chunk.length) {
                chunk = new byte[length];
            }
            int want = (int) Math.min(Math.max(length, CHUNK), Math.min(chunk.length, slice.limit - position));
            ByteBuffer target = ByteBuffer.wrap(chunk, 0, want);
            SegmentPlanner.readFully(channel, target, position);
            chunkStart = position;
            chunkLength = want;
        }
        return ByteBuffer.wrap(chunk, 0, chunkLength);
    }

    @Override
    public ColumnarBatch get() {
        return batch;
    }

    @Override
    public void close() throws IOException {
        batch.close();
        channel.close();
    }

    /** The same slice as rows, where Spark asks for rows. */
    static final class Rows implements PartitionReader<InternalRow> {
        private final SegmentReader reader;
        private java.util.Iterator<InternalRow> rows = java.util.Collections.emptyIterator();

        Rows(SegmentReader reader) {
            this.reader = reader;
        }

        @Override
        public boolean next() throws IOException {
            while (!rows.hasNext()) {
                if (!reader.next()) {
                    return false;
                }
                rows = reader.get().rowIterator();
            }
            return true;
        }

        @Override
        public InternalRow get() {
            return rows.next();
        }

        @Override
        public void close() throws IOException {
            reader.close();
        }
    }
}
