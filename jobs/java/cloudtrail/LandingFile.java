package cloudtrail;

import java.io.IOException;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.zip.CRC32;
import java.util.zip.DataFormatException;
import java.util.zip.Inflater;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.spark.SparkEnv;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import scala.Tuple2;

/**
 * One landing file, by its path: its bytes as text, or why it cannot be read (jobs/records/decode.py).
 *
 * <p>A path with a scheme other than file: (an S3 landing's object, s3a://bucket/key, where a cluster's executors
 * share no disk with the driver that fetched it) is read through Hadoop's file system for it, configured by Spark's
 * spark.hadoop.* settings as the executor got them.
 *
 * <p>Registered as a SQL function by jobs/spark/session.py and called once per file, in the JVM, so
 * no byte goes through a Python worker. It decompresses (every gzip member; a truncated or
 * corrupt stream is a file error, not a failed query or a silently skipped file), checks that
 * the bytes are UTF-8 without NUL, strips white space and a byte-order mark, and tells the
 * container's shape from its first character. Its records are Records.java's to find.
 */
public final class LandingFile implements UDF1<String, Row> {
  private static final long serialVersionUID = 1L;

  /** Spark's JSON parser's limits (Jackson's defaults): nesting levels, and characters in one string. */
  static final int MAX_DEPTH = 1000;

  static final int MAX_STRING_CHARS = 20_000_000;

  /**
   * Most bytes a file may decompress to: CloudTrail's files are tens of MB, and a gzip bomb (a GiB of zeros in a MB)
   * must cost a quarantined row, not the executor's heap.
   */
  static final int MAX_CONTENT_BYTES = 256 << 20;

  @Override
  public Row call(String path) {
    byte[] content;
    try {
      content = isLocal(path) ? Files.readAllBytes(Path.of(path.startsWith("file:") ? path.substring(5) : path)) : readStored(path);
    } catch (IOException | RuntimeException e) {
      return error(0, "unreadable_file", e.getClass().getSimpleName() + ": " + e.getMessage());
    }
    long fileBytes = content.length;
    int length = content.length;
    if (length >= 2 && (content[0] & 0xff) == 0x1f && (content[1] & 0xff) == 0x8b) {
      try {
        content = gunzip(content);
      } catch (TruncatedException e) {
        return error(fileBytes, "truncated_gzip", e.getMessage());
      } catch (DataFormatException e) {
        return error(fileBytes, "corrupt_gzip", "invalid gzip data: " + e.getMessage());
      } catch (TooLargeException e) {
        return error(fileBytes, "too_large", e.getMessage());
      }
      length = content.length;
    }
    String problem = textProblem(content, length);
    if (problem != null) {
      return error(fileBytes, "binary", problem);
    }
    int start = skipWhitespace(content, 0, length);
    if (length - start >= 3 && (content[start] & 0xff) == 0xef && (content[start + 1] & 0xff) == 0xbb
        && (content[start + 2] & 0xff) == 0xbf) {
      start = skipWhitespace(content, start + 3, length);
    }
    if (start == length) {
      return error(fileBytes, "empty_file", "no content");
    }
    String shape;
    if (content[start] == '{') {
      shape = "object";
    } else if (content[start] == '[') {
      shape = "array";
    } else {
      String first = new String(content, start, Math.min(4, length - start), java.nio.charset.StandardCharsets.UTF_8);
      return error(fileBytes, "not_json",
          "starts with '" + first.substring(0, first.offsetByCodePoints(0, 1)) + "', not a JSON object or array");
    }
    byte[] text = start == 0 && length == content.length ? content : Arrays.copyOfRange(content, start, length);
    return RowFactory.create(fileBytes, text, shape, null, null);
  }

  private static boolean isLocal(String path) {
    int scheme = path.indexOf("://");
    return scheme < 0 || path.startsWith("file:");
  }

  private static volatile Configuration hadoop;

  /** An object's bytes, through the Hadoop file system of its scheme. */
  private static byte[] readStored(String uri) throws IOException {
    org.apache.hadoop.fs.Path path = new org.apache.hadoop.fs.Path(uri);
    try (FSDataInputStream in = path.getFileSystem(hadoopConf()).open(path)) {
      return in.readAllBytes();
    }
  }

  /** Spark's Hadoop settings (spark.hadoop.*) in this JVM, read once: the ones its file systems were made with. */
  private static Configuration hadoopConf() {
    Configuration conf = hadoop;
    if (conf == null) {
      conf = new Configuration();
      for (Tuple2<String, String> setting : SparkEnv.get().conf().getAll()) {
        if (setting._1().startsWith("spark.hadoop.")) {
          conf.set(setting._1().substring("spark.hadoop.".length()), setting._2());
        }
      }
      hadoop = conf;
    }
    return conf;
  }

  private static Row error(long fileBytes, String reason, String detail) {
    return RowFactory.create(fileBytes, null, null, reason, detail);
  }

  private static int skipWhitespace(byte[] bytes, int from, int to) {
    while (from < to && (bytes[from] == ' ' || bytes[from] == '\t' || bytes[from] == '\r' || bytes[from] == '\n')) {
      from++;
    }
    return from;
  }

  private static final VarHandle LONGS = MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
  private static final long HIGH_BITS = 0x8080808080808080L;
  private static final long LOW_BITS = 0x0101010101010101L;

  /** Why the bytes are not text (a NUL, or not UTF-8), or null. */
  static String textProblem(byte[] b, int length) {
    int i = 0;
    while (i < length) {
      // CloudTrail's JSON is nearly all ASCII: 8 bytes at a time while none has its high bit set or is NUL.
      while (i + 8 <= length) {
        long word = (long) LONGS.get(b, i);
        if (((word | ((word - LOW_BITS) & ~word)) & HIGH_BITS) != 0) {
          break;
        }
        i += 8;
      }
      if (i == length) {
        break;
      }
      int c = b[i] & 0xff;
      if (c == 0) {
        return "contains NUL bytes";
      }
      if (c < 0x80) {
        i++;
        continue;
      }
      int need;
      int min;
      if (c >= 0xc2 && c <= 0xdf) {
        need = 1;
        min = 0x80;
      } else if (c >= 0xe0 && c <= 0xef) {
        need = 2;
        min = 0x800;
      } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;
        min = 0x10000;
      } else {
        return "not UTF-8: invalid start byte at byte " + i;
      }
      if (i + need >= length) {
        return "not UTF-8: unexpected end of data at byte " + i;
      }
      int code = c & (0x3f >> need);
      for (int k = 1; k <= need; k++) {
        int next = b[i + k] & 0xff;
        if ((next & 0xc0) != 0x80) {
          return "not UTF-8: invalid continuation byte at byte " + i;
        }
        code = (code << 6) | (next & 0x3f);
      }
      if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) {
        return "not UTF-8: invalid encoding at byte " + i;
      }
      i += need + 1;
    }
    return null;
  }

  static final class TruncatedException extends Exception {
    private static final long serialVersionUID = 1L;

    TruncatedException(String message) {
      super(message);
    }
  }

  static final class TooLargeException extends Exception {
    private static final long serialVersionUID = 1L;

    TooLargeException(String message) {
      super(message);
    }
  }

  /**
   * Every gzip member, decompressed; TruncatedException when the stream is cut short, TooLargeException past
   * MAX_CONTENT_BYTES.
   */
  static byte[] gunzip(byte[] data) throws TruncatedException, DataFormatException, TooLargeException {
    byte[] out = new byte[(int) Math.min(MAX_CONTENT_BYTES, Math.max(64L, data.length * 8L))];
    int size = 0;
    int position = 0;
    Inflater inflater = new Inflater(true);
    try {
      while (position < data.length) {
        int body = headerEnd(data, position);
        inflater.reset();
        inflater.setInput(data, body, data.length - body);
        CRC32 crc = new CRC32();
        int memberStart = size;
        while (!inflater.finished()) {
          if (size == out.length) {
            if (size >= MAX_CONTENT_BYTES) {
              throw new TooLargeException("decompresses to over " + (MAX_CONTENT_BYTES >> 20) + " MiB");
            }
            out = Arrays.copyOf(out, (int) Math.min(MAX_CONTENT_BYTES, out.length * 2L));
          }
          int n = inflater.inflate(out, size, out.length - size);
          if (n == 0 && (inflater.needsInput() || inflater.needsDictionary())) {
            throw new TruncatedException(
                "gzip stream ends early after " + (data.length - position) + " compressed bytes");
          }
          size += n;
        }
        crc.update(out, memberStart, size - memberStart);
        int trailer = data.length - inflater.getRemaining();
        if (trailer + 8 > data.length) {
          throw new TruncatedException(
              "gzip stream ends early after " + (data.length - position) + " compressed bytes");
        }
        long expectedCrc = readInt(data, trailer) & 0xffffffffL;
        long expectedSize = readInt(data, trailer + 4) & 0xffffffffL;
        if (expectedCrc != crc.getValue() || expectedSize != ((size - memberStart) & 0xffffffffL)) {
          throw new DataFormatException("CRC or length check failed");
        }
        position = trailer + 8;
      }
    } finally {
      inflater.end();
    }
    return Arrays.copyOf(out, size);
  }

  /** Where a gzip member's compressed body begins (RFC 1952 header). */
  private static int headerEnd(byte[] d, int p) throws TruncatedException, DataFormatException {
    if (d.length - p < 10) {
      if ((d[p] & 0xff) == 0x1f) {
        throw new TruncatedException("gzip stream ends early after " + (d.length - p) + " compressed bytes");
      }
      throw new DataFormatException("incorrect header check");
    }
    if ((d[p] & 0xff) != 0x1f || (d[p + 1] & 0xff) != 0x8b || d[p + 2] != 8) {
      throw new DataFormatException("incorrect header check");
    }
    int flags = d[p + 3] & 0xff;
    int q = p + 10;
    try {
      if ((flags & 4) != 0) {
        q += 2 + ((d[q] & 0xff) | (d[q + 1] & 0xff) << 8);
      }
      if ((flags & 8) != 0) {
        while (d[q++] != 0) {}
      }
      if ((flags & 16) != 0) {
        while (d[q++] != 0) {}
      }
      if ((flags & 2) != 0) {
        q += 2;
      }
    } catch (ArrayIndexOutOfBoundsException e) {
      throw new TruncatedException("gzip stream ends early after " + (d.length - p) + " compressed bytes");
    }
    if (q > d.length) {
      throw new TruncatedException("gzip stream ends early after " + (d.length - p) + " compressed bytes");
    }
    return q;
  }

  private static int readInt(byte[] d, int p) {
    return (d[p] & 0xff) | (d[p + 1] & 0xff) << 8 | (d[p + 2] & 0xff) << 16 | (d[p + 3] & 0xff) << 24;
  }
}
