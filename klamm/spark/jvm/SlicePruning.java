package klamm.spark.jvm;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.sources.And;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;

/**
 * A query's filters on topic, partition and offset applied to the planned slices: slices no row of which can
 * pass are left out, and offset bounds narrow a slice, so its reader decodes no batch outside them. Spark still
 * evaluates every filter on the rows; this only spares reading what they would drop.
 */
final class SlicePruning {
    private static final Set<Class<?>> COMPARISONS = Set.of(EqualTo.class, In.class, GreaterThan.class,
        GreaterThanOrEqual.class, LessThan.class, LessThanOrEqual.class);

    private SlicePruning() {
    }

    /** Whether `filter` (or a conjunct of it) is one `prune` uses. */
    static boolean usable(Filter filter) {
        if (filter instanceof And and) {
            return usable(and.left()) || usable(and.right());
        }
        String attribute = attribute(filter);
        return attribute != null && (attribute.equals("topic") || attribute.equals("partition")
                                     || attribute.equals("offset"));
    }

    static List<SegmentSlice> prune(List<SegmentSlice> slices, Filter[] filters) {
        List<SegmentSlice> kept = new ArrayList<>();
        for (SegmentSlice slice : slices) {
            long[] range = {slice.start, slice.end};
            boolean possible = true;
            for (Filter filter : filters) {
                possible &= allows(slice, filter, range);
            }
            if (possible && range[0] < range[1]) {
                kept.add(range[0] == slice.start && range[1] == slice.end ? slice : slice.narrowed(range[0], range[1]));
            }
        }
        return kept;
    }

    /** False if no row of `slice` can pass `filter`; narrows `range` ([start, end) offsets) to what can. */
    private static boolean allows(SegmentSlice slice, Filter filter, long[] range) {
        if (filter instanceof And and) {
            return allows(slice, and.left(), range) & allows(slice, and.right(), range);
        }
        String attribute = attribute(filter);
        if ("topic".equals(attribute)) {
            return topicAllowed(slice.topic, filter);
        }
        if ("partition".equals(attribute)) {
            long[] partitions = {slice.partition, slice.partition + 1L};
            boolean possible = narrow(filter, partitions);
            return possible && partitions[0] <= slice.partition && slice.partition < partitions[1];
        }
        if ("offset".equals(attribute)) {
            return narrow(filter, range);
        }
        return true;
    }

    private static boolean topicAllowed(String topic, Filter filter) {
        if (filter instanceof EqualTo equalTo) {
            return topic.equals(equalTo.value());
        }
        if (filter instanceof In in) {
            for (Object value : in.values()) {
                if (topic.equals(value)) {
                    return true;
                }
            }
            return false;
        }
        return true;
    }

    /** Narrows [range[0], range[1]) by a comparison of a whole number; false if the filter admits none of it. */
    private static boolean narrow(Filter filter, long[] range) {
        if (filter instanceof In in) {
            long low = Long.MAX_VALUE;
            long high = Long.MIN_VALUE;
            for (Object value : in.values()) {
                if (!(value instanceof Number number)) {
                    return true; // not a whole number: nothing to conclude
                }
                low = Math.min(low, number.longValue());
                high = Math.max(high, number.longValue());
            }
            return bound(range, low, high == Long.MAX_VALUE ? high : high + 1);
        }
        Object value = value(filter);
        if (!(value instanceof Long || value instanceof Integer || value instanceof Short || value instanceof Byte)) {
            return true;
        }
        long v = ((Number) value).longValue();
        long next = v == Long.MAX_VALUE ? v : v + 1;
        if (filter instanceof EqualTo) {
            return bound(range, v, next);
        }
        if (filter instanceof GreaterThan) {
            return bound(range, next, Long.MAX_VALUE);
        }
        if (filter instanceof GreaterThanOrEqual) {
            return bound(range, v, Long.MAX_VALUE);
        }
        if (filter instanceof LessThan) {
            return bound(range, Long.MIN_VALUE, v);
        }
        if (filter instanceof LessThanOrEqual) {
            return bound(range, Long.MIN_VALUE, next);
        }
        return true;
    }

    private static boolean bound(long[] range, long low, long high) {
        range[0] = Math.max(range[0], low);
        range[1] = Math.min(range[1], high);
        return range[0] < range[1];
    }

    /** The column a comparison of a column with values (the kinds used here) names; null for any other filter. */
    private static String attribute(Filter filter) {
        return COMPARISONS.contains(filter.getClass()) ? filter.references()[0] : null;
    }

    /** What a comparison with one value compares its column to (the second field of these case classes). */
    private static Object value(Filter filter) {
        return COMPARISONS.contains(filter.getClass()) && !(filter instanceof In)
            ? ((scala.Product) filter).productElement(1) : null;
    }
}
