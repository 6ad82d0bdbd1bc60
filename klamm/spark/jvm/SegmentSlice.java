package klamm.spark.jvm;

import org.apache.spark.sql.connector.read.InputPartition;

/** The records of one segment file that a query reads: offsets [start, end), file bytes [0, limit). */
final class SegmentSlice implements InputPartition {
    private static final long serialVersionUID = 1L;

    final String path;
    final String topic;
    final int partition;
    final long start;
    final long end;
    final long limit;
    /** Aborted transactions overlapping the slice: producer id, first offset, last offset (its marker). */
    final long[] abortedProducers;
    final long[] abortedFirst;
    final long[] abortedLast;

    SegmentSlice(String path, String topic, int partition, long start, long end, long limit, long[] abortedProducers,
                 long[] abortedFirst, long[] abortedLast) {
        this.path = path;
        this.topic = topic;
        this.partition = partition;
        this.start = start;
        this.end = end;
        this.limit = limit;
        this.abortedProducers = abortedProducers;
        this.abortedFirst = abortedFirst;
        this.abortedLast = abortedLast;
    }

    /** The same segment's records in [start, end), within this slice's. */
    SegmentSlice narrowed(long start, long end) {
        return new SegmentSlice(path, topic, partition, start, end, limit, abortedProducers, abortedFirst,
                                abortedLast);
    }

    boolean aborted(long producerId, long offset) {
        for (int i = 0; i < abortedProducers.length; i++) {
            if (abortedProducers[i] == producerId && abortedFirst[i] <= offset && offset <= abortedLast[i]) {
                return true;
            }
        }
        return false;
    }

    @Override
    public String toString() {
        return topic + "-" + partition + " [" + start + ", " + end + ") of " + path;
    }
}
