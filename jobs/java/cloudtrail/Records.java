package cloudtrail;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.expressions.objects.StaticInvoke;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.classic.SparkSession;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import scala.Option;
import scala.collection.immutable.Seq;

/**
 * A container's records, each typed, with its text and key flags, in one pass over the container's tokens: the SQL
 * function {@code cloudtrail_records(content, item type as JSON, known, flagged, markers)} (jobs/records/decode.py).
 *
 * <p>The container is {"Records":[...]} or a bare array of records, as LandingFile decoded it. One Jackson pass finds
 * each record, its byte range (its text), a bit set of its keys (KeyFlags: bit 0 for a key outside {@code known}, bit
 * i + 1 for the i-th of {@code flagged}), and reads its values straight into the item type's {@code typed} struct, as
 * Spark's parser over the bytes reads them (tests/test_decode.py holds the two together): a string is its text, a
 * number, boolean, object or array where a string is expected is its text as the file holds it, an unknown key is
 * skipped, a repeated key keeps its last value. Spark's parser took a second tokenisation of the container and twice
 * the scan's CPU to build its rows (BENCHMARKS.md, "One pass from the tokens to the typed row").
 *
 * <p>A value of another type where a struct or an array is expected (a {@code userIdentity} that is a string) makes
 * Spark keep a partial record, by rules of its own: for such a container the records are typed by Spark's parser
 * (Json.java) and paired with the pass's by position, as they were before this pass. Null, for the slow path of
 * jobs/records/transforms.py, where the pass cannot place the records exactly: more than one JSON value, invalid or
 * non-strict JSON, a records array with an element that is not an object (Spark's typed parse would drop the whole
 * array), no "Records" array or two of them, and a bare array none of whose elements has a key of {@code markers}
 * ([1, 2] or [{"a": 1}] is no CloudTrail file).
 */
public final class Records {
  // Stricter than Spark's parser (no single quotes, no NaN), within its limits: what the pass takes, Spark parses.
  private static final JsonFactory JSON =
      JsonFactory.builder()
          .streamReadConstraints(StreamReadConstraints.builder()
              .maxNestingDepth(LandingFile.MAX_DEPTH)
              .maxStringLength(LandingFile.MAX_STRING_CHARS)
              .build())
          .build();

  private Records() {}

  /** Registers {@code name} in the session's function registry (jobs/spark/session.py). */
  public static void register(SparkSession session, String name) {
    session.sessionState().functionRegistry().createOrReplaceTempFunction(name, Records::invoke, "java_udf");
  }

  private static Expression invoke(Seq<Expression> arguments) {
    if (arguments.size() != 5 || !arguments.apply(1).foldable()) {
      throw new IllegalArgumentException("cloudtrail_records(content, item type as JSON, known, flagged, markers)");
    }
    DataType item = DataType.fromJson(arguments.apply(1).eval(null).toString());
    // Compiled into the query, in Spark's own types: a UDF's result would be converted from Java objects.
    return new StaticInvoke(Records.class, new ArrayType(item, true), "items", arguments, StaticInvoke.apply$default$5(),
        true, true, true, Option.empty());
  }

  /** The items of a container (the item type's typed, scan and problem fields), or null for the slow path. */
  public static ArrayData items(byte[] content, UTF8String itemType, UTF8String known, UTF8String flagged,
      UTF8String markers) {
    KeyFlags.Keys keys = KeyFlags.Keys.of(known.toString(), flagged.toString());
    Item item = Item.of(itemType.toString(), keys);
    if (content.length > LandingFile.MAX_STRING_CHARS) {
      // It could hold a nested string beyond Jackson's limit, which the pass, skipping it, would never measure, and
      // which Spark's parser refuses (Json.java): its records are quarantined as too large, as they were before.
      return typedBySpark(content, item, keys, markers.toString());
    }
    try {
      return read(content, item, keys, markers.toString(), true);
    } catch (Mismatch e) {
      return typedBySpark(content, item, keys, markers.toString());
    } catch (IOException e) {
      return null; // not JSON, or beyond the limits: the slow path finds each record's reason
    }
  }

  /** The records of one container; with {@code typed}, each record read into the typed struct as well. */
  private static GenericArrayData read(byte[] text, Item item, KeyFlags.Keys keys, String markers, boolean typed)
      throws IOException {
    Struct record = item.record;
    long marked = 0; // the flags of all the records together
    List<Object> items = new ArrayList<>();
    try (JsonParser parser = JSON.createParser(text)) {
      JsonToken root = parser.nextToken();
      if (root == JsonToken.START_OBJECT && !toRecordsArray(parser)) {
        return null; // no "Records" array: a single record, a digest, something else
      }
      JsonToken token;
      while ((token = parser.nextToken()) != JsonToken.END_ARRAY) {
        if (token != JsonToken.START_OBJECT) {
          return null; // Spark's typed parse drops the whole array for one element that is no object
        }
        int begin = (int) parser.currentTokenLocation().getByteOffset();
        Object[] values = typed ? new Object[record.fields.length] : null;
        long flags = record.readFields(parser, text, values, keys);
        int end = (int) parser.currentLocation().getByteOffset();
        InternalRow scan = new GenericInternalRow(new Object[] {Arrays.copyOfRange(text, begin, end), flags});
        items.add(new GenericInternalRow(new Object[] {typed ? new GenericInternalRow(values) : null, scan, null}));
        marked |= flags;
      }
      if (root == JsonToken.START_OBJECT) {
        while (parser.nextToken() == JsonToken.FIELD_NAME) { // the container's other keys: Spark ignores them too
          if ("Records".equals(parser.currentName())) {
            return null; // Spark keeps the last "Records", and these records are the first's
          }
          parser.nextToken();
          parser.skipChildren();
        }
      }
      if (parser.nextToken() != null) {
        return null; // content after the container: the slow path says what
      }
      return root == JsonToken.START_OBJECT || (marked & keys.mask(markers)) != 0
          ? new GenericArrayData(items.toArray())
          : null;
    }
  }

  /** Moves the parser into the "Records" array of the root object; false when there is none. */
  private static boolean toRecordsArray(JsonParser parser) throws IOException {
    while (parser.nextToken() == JsonToken.FIELD_NAME) {
      String key = parser.currentName();
      JsonToken value = parser.nextToken();
      if ("Records".equals(key)) {
        return value == JsonToken.START_ARRAY;
      }
      parser.skipChildren();
    }
    return false;
  }

  /**
   * A container with a value Spark keeps a partial record for: its records found by the pass, typed by Spark's parser
   * over the bytes, paired by position (the longer list padded with nulls, as arrays_zip pairs them); null when the
   * pass refuses the container or Spark's parse gives no records.
   */
  private static ArrayData typedBySpark(byte[] text, Item item, KeyFlags.Keys keys, String markers) {
    GenericArrayData scanned;
    try {
      scanned = read(text, item, keys, markers, false);
    } catch (IOException e) {
      return null;
    }
    if (scanned == null) {
      return null;
    }
    ArrayData typed;
    if (text[0] == '{') {
      InternalRow parsed = (InternalRow) Json.value(text, item.container);
      typed = parsed == null || parsed.isNullAt(0) ? null : parsed.getArray(0);
    } else {
      typed = (ArrayData) Json.value(text, item.array);
    }
    if (typed == null) {
      return null;
    }
    int fields = item.record.fields.length;
    Object[] paired = new Object[Math.max(typed.numElements(), scanned.numElements())];
    for (int i = 0; i < paired.length; i++) {
      InternalRow found = i < scanned.numElements() ? scanned.getStruct(i, 3) : null;
      Object record = i < typed.numElements() && !typed.isNullAt(i) ? typed.getStruct(i, fields) : null;
      paired[i] = new GenericInternalRow(new Object[] {record, found == null ? null : found.get(1, null), null});
    }
    return new GenericArrayData(paired);
  }

  /** A value of a type Spark's parser keeps a partial record for: the container is typed by Spark's parser. */
  private static final class Mismatch extends RuntimeException {
    private static final long serialVersionUID = 1L;
    static final Mismatch INSTANCE = new Mismatch();

    private Mismatch() {
      super("a value of another type than the schema's", null, false, false);
    }
  }

  /** How a value of the typed record is read from the tokens: a string, a struct of values, or an array of them. */
  private abstract static class Value {
    /** The value whose first token is {@code token}, the parser left on its last token. */
    abstract Object read(JsonParser parser, JsonToken token, byte[] text) throws IOException;

    /** False for a null, true for {@code start}: any other token is a value of another type. */
    static boolean opens(JsonToken token, JsonToken start) {
      if (token == JsonToken.VALUE_NULL) {
        return false;
      }
      if (token != start) {
        throw Mismatch.INSTANCE;
      }
      return true;
    }

    static Value of(DataType type) {
      if (type instanceof StringType) {
        return new Text();
      }
      if (type instanceof StructType struct) {
        return new Struct(struct, null);
      }
      if (type instanceof ArrayType array) {
        return new Array(of(array.elementType()));
      }
      throw new IllegalArgumentException("cloudtrail_records reads strings, structs and arrays, not " + type.sql());
    }
  }

  private static final class Text extends Value {
    @Override
    Object read(JsonParser parser, JsonToken token, byte[] text) throws IOException {
      if (token == JsonToken.VALUE_NULL) {
        return null;
      }
      int begin = (int) parser.currentTokenLocation().getByteOffset();
      if (token == JsonToken.VALUE_STRING) {
        // A string without escapes is its bytes (the text check made them UTF-8): no decoding into a Java string and
        // back. The parser then skips the string itself as it moves on.
        int end = begin + 1;
        while (text[end] != '"' && text[end] != '\\') {
          end++;
        }
        return text[end] == '"' ? UTF8String.fromBytes(text, begin + 1, end - begin - 1)
            : UTF8String.fromString(parser.getText());
      }
      // Anything else where text is expected is its text as the file holds it, as Spark's parser over bytes keeps it.
      parser.skipChildren();
      int end = (int) parser.currentLocation().getByteOffset();
      return UTF8String.fromBytes(Arrays.copyOfRange(text, begin, end));
    }
  }

  private static final class Struct extends Value {
    final Map<String, Integer> index = new HashMap<>();
    final Value[] fields;
    // The key flag of each field (the record's own fields only; zero in a nested struct).
    final long[] flags;

    Struct(StructType type, KeyFlags.Keys keys) {
      StructField[] declared = type.fields();
      fields = new Value[declared.length];
      flags = new long[declared.length];
      for (int i = 0; i < declared.length; i++) {
        index.put(declared[i].name(), i);
        fields[i] = Value.of(declared[i].dataType());
        flags[i] = keys == null ? 0 : keys.flag(declared[i].name());
      }
    }

    @Override
    Object read(JsonParser parser, JsonToken token, byte[] text) throws IOException {
      if (!opens(token, JsonToken.START_OBJECT)) {
        return null;
      }
      Object[] values = new Object[fields.length];
      readFields(parser, text, values, null);
      return new GenericInternalRow(values);
    }

    /**
     * The object's fields, up to its end, into {@code values} (null: each value skipped), and the key flags of its keys
     * ({@code keys} null: none, as in a nested struct).
     */
    long readFields(JsonParser parser, byte[] text, Object[] values, KeyFlags.Keys keys) throws IOException {
      long found = 0;
      while (parser.nextToken() == JsonToken.FIELD_NAME) {
        String name = parser.currentName();
        Integer field = index.get(name);
        JsonToken value = parser.nextToken();
        if (field != null) {
          found |= flags[field];
        } else if (keys != null) {
          found |= keys.flag(name);
        }
        if (field != null && values != null) {
          values[field] = fields[field].read(parser, value, text);
        } else {
          parser.skipChildren();
        }
      }
      return found;
    }
  }

  private static final class Array extends Value {
    final Value element;

    Array(Value element) {
      this.element = element;
    }

    @Override
    Object read(JsonParser parser, JsonToken token, byte[] text) throws IOException {
      if (!opens(token, JsonToken.START_ARRAY)) {
        return null;
      }
      List<Object> values = new ArrayList<>();
      JsonToken next;
      while ((next = parser.nextToken()) != JsonToken.END_ARRAY) {
        values.add(element.read(parser, next, text));
      }
      return new GenericArrayData(values.toArray());
    }
  }

  /** The item type: how each value of the typed record is read, and the containers Spark's parser reads. */
  private static final class Item {
    // Every task of the JVM asks with the same type and keys: they are read once.
    private static final Map<List<Object>, Item> READ = new ConcurrentHashMap<>();

    final Struct record;
    final ArrayType array; // [...]
    final StructType container; // {"Records":[...]}

    private Item(StructType typed, KeyFlags.Keys keys) {
      record = new Struct(typed, keys);
      array = new ArrayType(typed, true);
      container = new StructType(new StructField[] {new StructField("Records", array, true, Metadata.empty())});
    }

    static Item of(String itemType, KeyFlags.Keys keys) {
      return READ.computeIfAbsent(List.of(itemType, keys), key -> {
        StructType item = (StructType) DataType.fromJson(itemType);
        return new Item((StructType) item.apply("typed").dataType(), keys);
      });
    }
  }
}
