package cloudtrail;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.TaskID;
import org.apache.hadoop.mapreduce.TaskType;
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl;
import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.Function2;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.catalog.ExternalCatalogUtils;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.execution.datasources.OutputWriter;
import org.apache.spark.sql.execution.datasources.OutputWriterFactory;
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.util.SerializableConfiguration;
import scala.collection.immutable.Map$;

/**
 * One micro-batch into both tables, the events and the quarantine, in one Spark job (jobs/ingest/batch_writer.py).
 *
 * <p>Spark's file sink writes one table a job, so a batch with two outputs was computed once, cached,
 * and read three times (counted, then each table written). Here each task writes its rows to
 * Parquet files in the two tables' partition folders as they come, with a writer open per partition
 * (no sort), and counts them on the way. The files become rows of a table only when the batch's
 * Iceberg commit names them (jobs/tables/record_table.py), which records the batch id: a batch is
 * committed once. Files of a failed task or of an attempt that never commits are no table's rows,
 * and the publish's orphan removal deletes them (jobs/iceberg/upkeep.py).
 *
 * <p>Each input row (jobs/rows.py's WRITER_ROW, by position: the ROW_* ordinals below): the events row
 * (a struct of the table's data columns) or null, the quarantine row (likewise) or null, the event date
 * (days), the reason, the source file, the event time (microseconds), late, implausible, future-dated,
 * counted (booleans; a row the batch keeps from a replaced quarantine file is written, not counted). The
 * result is JSON: the files written, each with its table (0 events, 1 quarantine), and per (reason,
 * event date, source file) the rows, late, implausible and future-dated ones, and the newest event
 * time that is not future-dated.
 */
public final class TableWriter {
  // Writers a task keeps open at once; past it the least recently used one is closed (a batch of a
  // backfill can hold events of hundreds of dates, and each writer buffers its row group).
  private static final int OPEN_WRITERS = 32;
  // An input row's fields by position, named as jobs/rows.py's WRITER_ROW names them (a test holds the two together).
  static final int ROW_EVENTS = 0;
  static final int ROW_QUARANTINE = 1;
  static final int ROW_EVENT_DATE = 2;
  static final int ROW_REASON = 3;
  static final int ROW_SOURCE_FILE = 4;
  static final int ROW_EVENT_TIME = 5;
  static final int ROW_LATE = 6;
  static final int ROW_IMPLAUSIBLE = 7;
  static final int ROW_FUTURE_DATED = 8;
  static final int ROW_COUNTED = 9;

  private TableWriter() {}

  /** A boolean field of an input row, false when null. */
  private static boolean flag(InternalRow row, int field) {
    return !row.isNullAt(field) && row.getBoolean(field);
  }

  /** Write the rows; {@code events}/{@code quarantine} false: that table has this batch already. */
  public static String write(
      Dataset<Row> rows,
      String eventsPath,
      String eventsColumn,
      boolean events,
      String quarantinePath,
      String quarantineColumn,
      boolean quarantine,
      long batchId) {
    StructType schema = rows.schema();
    Table[] tables = {
      events ? Table.of(rows, eventsPath, eventsColumn, (StructType) schema.fields()[0].dataType()) : null,
      quarantine ? Table.of(rows, quarantinePath, quarantineColumn, (StructType) schema.fields()[1].dataType()) : null
    };
    List<String> results = rows.queryExecution().toRdd().toJavaRDD().mapPartitionsWithIndex(new Task(tables, batchId), false).collect();
    List<Object> files = new ArrayList<>();
    List<Object> groups = new ArrayList<>();
    ObjectMapper json = new ObjectMapper();
    try {
      for (String result : results) {
        Map<?, ?> part = json.readValue(result, Map.class);
        files.addAll((List<?>) part.get("files"));
        groups.addAll((List<?>) part.get("groups"));
      }
      Map<String, Object> merged = new LinkedHashMap<>();
      merged.put("files", files);
      merged.put("groups", groups);
      return json.writeValueAsString(merged);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** One table's output: where, its partition column, and a Parquet writer factory for its data columns. */
  private static final class Table implements Serializable {
    private static final long serialVersionUID = 1L;
    final String path;
    final String column;
    final StructType schema;
    final OutputWriterFactory factory;
    final SerializableConfiguration conf;

    private Table(String path, String column, StructType schema, OutputWriterFactory factory, Configuration conf) {
      this.path = path;
      this.column = column;
      this.schema = schema;
      this.factory = factory;
      this.conf = new SerializableConfiguration(conf);
    }

    static Table of(Dataset<Row> rows, String path, String column, StructType schema) {
      try {
        // A job (configuration) of its own each: Parquet's write support reads the schema from it.
        Job job = Job.getInstance(rows.sparkSession().sessionState().newHadoopConf());
        OutputWriterFactory factory =
            new ParquetFileFormat().prepareWrite(rows.sparkSession(), job, Map$.MODULE$.<String, String>empty(), schema);
        return new Table(path, column, schema, factory, job.getConfiguration());
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }

  /** The rows and figures of one (reason, event date, source file). */
  private static final class Group {
    long rows;
    long late;
    long implausible;
    long future;
    long newest = Long.MIN_VALUE;
  }

  private static final class Task implements Function2<Integer, Iterator<InternalRow>, Iterator<String>> {
    private static final long serialVersionUID = 1L;
    private final Table[] tables;
    private final long batchId;

    Task(Table[] tables, long batchId) {
      this.tables = tables;
      this.batchId = batchId;
    }

    @Override
    public Iterator<String> call(Integer partition, Iterator<InternalRow> rows) throws IOException {
      Writers writers = new Writers(tables, batchId, partition);
      Map<List<Object>, Group> groups = new HashMap<>();
      try {
        while (rows.hasNext()) {
          InternalRow row = rows.next();
          boolean isEvent = !row.isNullAt(ROW_EVENTS);
          int table = isEvent ? ROW_EVENTS : ROW_QUARANTINE; // the tables' order is the rows' (0 events, 1 quarantine)
          Integer day = row.isNullAt(ROW_EVENT_DATE) ? null : row.getInt(ROW_EVENT_DATE);
          String reason = row.isNullAt(ROW_REASON) ? null : row.getUTF8String(ROW_REASON).toString();
          if (tables[table] != null) {
            String value = isEvent ? LocalDate.ofEpochDay(day).toString() : reason;
            writers.get(table, value).write(row.getStruct(table, tables[table].schema.size()));
          }
          if (row.isNullAt(ROW_COUNTED) || !row.getBoolean(ROW_COUNTED)) {
            continue;
          }
          List<Object> key = new ArrayList<>(3);
          key.add(reason);
          key.add(day);
          key.add(row.isNullAt(ROW_SOURCE_FILE) ? null : row.getUTF8String(ROW_SOURCE_FILE).toString());
          Group group = groups.computeIfAbsent(key, k -> new Group());
          group.rows++;
          group.late += flag(row, ROW_LATE) ? 1 : 0;
          group.implausible += flag(row, ROW_IMPLAUSIBLE) ? 1 : 0;
          boolean future = flag(row, ROW_FUTURE_DATED);
          group.future += future ? 1 : 0;
          if (!future && !row.isNullAt(ROW_EVENT_TIME)) {
            group.newest = Math.max(group.newest, row.getLong(ROW_EVENT_TIME));
          }
        }
      } finally {
        writers.closeAll();
      }
      List<Object> groupRows = new ArrayList<>(groups.size());
      for (Map.Entry<List<Object>, Group> entry : groups.entrySet()) {
        Group g = entry.getValue();
        List<Object> out = new ArrayList<>(entry.getKey());
        out.add(g.rows);
        out.add(g.late);
        out.add(g.implausible);
        out.add(g.future);
        out.add(g.newest == Long.MIN_VALUE ? null : g.newest);
        groupRows.add(out);
      }
      Map<String, Object> result = new LinkedHashMap<>();
      result.put("files", writers.written);
      result.put("groups", groupRows);
      return List.of(new ObjectMapper().writeValueAsString(result)).iterator();
    }
  }

  /** A task's open Parquet writers, one per (table, partition), the least recently used closed past OPEN_WRITERS. */
  private static final class Writers {
    private final Table[] tables;
    private final long batchId;
    private final int partition;
    // Per (table, partition value): its open writer; access order, so the first is the least recently used.
    private final LinkedHashMap<List<Object>, OutputWriter> open = new LinkedHashMap<>(16, 0.75f, true);
    private final Map<List<Object>, Integer> opened = new HashMap<>();
    private final TaskAttemptContext[] contexts;
    final List<List<Object>> written = new ArrayList<>();

    Writers(Table[] tables, long batchId, int partition) {
      this.tables = tables;
      this.batchId = batchId;
      this.partition = partition;
      this.contexts = new TaskAttemptContext[tables.length];
      TaskContext task = TaskContext.get();
      int attempt = task == null ? 0 : task.attemptNumber();
      for (int i = 0; i < tables.length; i++) {
        if (tables[i] != null) {
          TaskAttemptID id = new TaskAttemptID(new TaskID(new JobID("cloudtrail" + batchId, i), TaskType.MAP, partition), attempt);
          contexts[i] = new TaskAttemptContextImpl(tables[i].conf.value(), id);
        }
      }
    }

    OutputWriter get(int table, String value) throws IOException {
      List<Object> key = List.of(table, Objects.requireNonNull(value, "partition value"));
      OutputWriter writer = open.get(key);
      if (writer != null) {
        return writer;
      }
      if (open.size() >= OPEN_WRITERS) {
        Iterator<Map.Entry<List<Object>, OutputWriter>> eldest = open.entrySet().iterator();
        close(eldest.next());
        eldest.remove();
      }
      Table t = tables[table];
      int count = opened.merge(key, 1, Integer::sum) - 1;
      String folder = ExternalCatalogUtils.getPartitionPathString(t.column, value);
      String name = String.format("part-%05d-%s-b%d.c%03d%s", partition, UUID.randomUUID(), batchId, count,
          t.factory.getFileExtension(contexts[table]));
      writer = t.factory.newInstance(new Path(new Path(t.path, folder), name).toString(), t.schema, contexts[table]);
      open.put(key, writer);
      return writer;
    }

    private void close(Map.Entry<List<Object>, OutputWriter> entry) {
      entry.getValue().close();
      written.add(List.of(entry.getKey().get(0), entry.getValue().path()));
    }

    void closeAll() {
      for (Map.Entry<List<Object>, OutputWriter> entry : open.entrySet()) {
        close(entry);
      }
      open.clear();
    }
  }
}
