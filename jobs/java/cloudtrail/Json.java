package cloudtrail;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.json.CreateJacksonParser;
import org.apache.spark.sql.catalyst.json.JSONOptions;
import org.apache.spark.sql.catalyst.json.JacksonParser;
import org.apache.spark.sql.catalyst.util.FailureSafeParser;
import org.apache.spark.sql.catalyst.util.PermissiveMode$;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Metadata;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Spark's {@code from_json}, reading bytes: how Records.java types a container Spark keeps partial records of.
 *
 * <p>The parse is Spark's own (JacksonParser behind a permissive FailureSafeParser, as JsonToStructsEvaluator builds
 * it, partial results included), with one difference: from_json hands Jackson a Reader, so a nested value read into a
 * string (requestParameters) is written anew, its numbers through doubles ({@code 1e400} became the string
 * {@code "Infinity"}, 35 digits became {@code 0.1}); over bytes, Spark keeps the value's text as the file holds it.
 *
 * <p>A text longer than Jackson's limit on one string (LandingFile.MAX_STRING_CHARS) could hold a string beyond it, which
 * Spark, copying a nested value's bytes, would never measure: such a text is read through a Reader, as from_json reads
 * it, so it fails where it failed before and its records are quarantined as too large (Salvage.java).
 */
final class Json {
  private Json() {}

  /** The value of {@code bytes} in {@code type} (a struct or an array) as from_json gives it, or null. */
  static Object value(byte[] bytes, DataType type) {
    Parse parse = PARSES.get().get(type);
    if (parse == null) {
      parse = new Parse(type);
      PARSES.get().put(type, parse);
    }
    return parse.value(bytes);
  }

  private static final ThreadLocal<Map<DataType, Parse>> PARSES = ThreadLocal.withInitial(HashMap::new);

  /** One type's parse, for one thread at a time (Spark's JacksonParser keeps state between tokens). */
  private static final class Parse {
    private final DataType type;
    private final FailureSafeParser<byte[]> parser;

    Parse(DataType type) {
      this.type = type;
      SQLConf conf = SQLConf.get();
      JSONOptions options = new JSONOptions(scala.collection.immutable.Map$.MODULE$.empty(), conf.sessionLocalTimeZone(),
          conf.columnNameOfCorruptRecord());
      StructType schema = type instanceof StructType struct ? struct
          : new StructType(new StructField[] {new StructField("value", type, true, Metadata.empty())});
      JacksonParser raw = new JacksonParser(type, options, false, JacksonParser.$lessinit$greater$default$4());
      parser = new FailureSafeParser<>(bytes -> raw.parse(bytes, Parse::tokens, UTF8String::fromBytes),
          PermissiveMode$.MODULE$, schema, options.columnNameOfCorruptRecord());
    }

    private static JsonParser tokens(JsonFactory factory, byte[] bytes) {
      if (bytes.length > LandingFile.MAX_STRING_CHARS) {
        return CreateJacksonParser.utf8String(factory, UTF8String.fromBytes(bytes));
      }
      try {
        return factory.createParser(bytes);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }

    /** The value as from_json gives it: an InternalRow or ArrayData, or null. */
    Object value(byte[] bytes) {
      scala.collection.Iterator<InternalRow> rows = parser.parse(bytes);
      InternalRow row = rows.hasNext() ? rows.next() : null;
      return type instanceof StructType || row == null ? row : row.get(0, type);
    }
  }
}
