package klamm.spark.jvm;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * format("klamm-segments") in the JVM: the rows of klamm.spark.segments (the same options, slices and rows),
 * handed to Spark as columnar batches so that no row crosses from Python. klamm.spark.configure puts it on a
 * session's class path; klamm.spark.register then leaves the Python reader out.
 */
public final class SegmentsSource implements TableProvider, DataSourceRegister {
    @Override
    public String shortName() {
        return "klamm-segments";
    }

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return SegmentOptions.schema(SegmentOptions.includeHeaders(options));
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new SegmentsTable(schema);
    }

    private record SegmentsTable(StructType schema) implements SupportsRead {
        @Override
        public String name() {
            return "klamm-segments";
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            return new SegmentsScanBuilder(new SegmentOptions(options), schema);
        }
    }

    /**
     * Reads only the columns a query uses (`count()` reads none: a batch's records are then only checked), and
     * only the slices and offsets its filters on topic, partition and offset leave (klamm.spark.jvm.SlicePruning).
     */
    private static final class SegmentsScanBuilder implements ScanBuilder, SupportsPushDownRequiredColumns,
                                                             SupportsPushDownFilters {
        private final SegmentOptions options;
        private StructType schema;
        private Filter[] pushed = new Filter[0];

        SegmentsScanBuilder(SegmentOptions options, StructType schema) {
            this.options = options;
            this.schema = schema;
        }

        /** The required top-level columns, whole: a pruned `headers` struct would not match what is decoded. */
        @Override
        public void pruneColumns(StructType required) {
            List<String> names = java.util.Arrays.asList(required.fieldNames());
            StructType kept = new StructType();
            for (StructField field : schema.fields()) {
                if (names.contains(field.name())) {
                    kept = kept.add(field);
                }
            }
            schema = kept;
        }

        /** All of `filters` still apply to the rows (Spark evaluates them): those used here only prune. */
        @Override
        public Filter[] pushFilters(Filter[] filters) {
            pushed = java.util.Arrays.stream(filters).filter(SlicePruning::usable).toArray(Filter[]::new);
            return filters;
        }

        @Override
        public Filter[] pushedFilters() {
            return pushed;
        }

        @Override
        public Scan build() {
            return new SegmentsScan(options, schema, pushed);
        }
    }

    private record SegmentsScan(SegmentOptions options, StructType readSchema, Filter[] filters)
            implements Scan, Batch {
        @Override
        public String description() {
            return "klamm-segments " + options.logDirs;
        }

        @Override
        public Batch toBatch() {
            return this;
        }

        @Override
        public InputPartition[] planInputPartitions() {
            List<SegmentSlice> slices = SlicePruning.prune(SegmentPlanner.plan(options), filters);
            return slices.toArray(new InputPartition[0]);
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return new ReaderFactory(readSchema);
        }
    }

    private record ReaderFactory(StructType schema) implements PartitionReaderFactory {
        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            try {
                return new SegmentReader((SegmentSlice) partition, schema);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            return new SegmentReader.Rows((SegmentReader) createColumnarReader(partition));
        }
    }
}
