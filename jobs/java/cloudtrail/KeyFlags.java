package cloudtrail;

import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.sql.api.java.UDF3;
import scala.collection.Iterator;
import scala.collection.Seq;

/**
 * A record's key flags (jobs/records/decode.py, FLAGGED_KEYS): bit 0 for a key outside the schema, bit i + 1 for the
 * i-th flagged key. The pass sets them as it finds each record of a container (Records); the SQL function
 * {@code cloudtrail_key_flags(keys, known, flagged)} sets them for a record the slow path split out, from its keys
 * (null for no keys: the text is no JSON object). One definition for both paths, and one call where the slow path's
 * flags took a SQL expression of about 270 nodes per use.
 */
public final class KeyFlags implements UDF3<Seq<String>, String, String, Long> {
  private static final long serialVersionUID = 1L;

  @Override
  public Long call(Seq<String> recordKeys, String known, String flagged) {
    if (recordKeys == null) {
      return null;
    }
    Keys lists = Keys.of(known, flagged);
    long flags = 0;
    Iterator<String> each = recordKeys.iterator();
    while (each.hasNext()) {
      flags |= lists.flag(each.next());
    }
    return flags;
  }

  /** The schema's keys and the flagged keys' bits, from their comma-separated lists. */
  static final class Keys {
    // Every task of the JVM asks with the same two lists: they are read once.
    private static final Map<String, Keys> READ = new ConcurrentHashMap<>();

    private final Set<String> known;
    private final Map<String, Integer> bits = new HashMap<>();

    Keys(String known, String flagged) {
      this.known = new HashSet<>(Arrays.asList(known.split(",")));
      String[] names = flagged.split(",");
      for (int i = 0; i < names.length; i++) {
        bits.put(names[i], i + 1);
      }
    }

    static Keys of(String known, String flagged) {
      return READ.computeIfAbsent(known + "\n" + flagged, k -> new Keys(known, flagged));
    }

    /** The flags of the keys `names` (comma-separated, each flagged) together. */
    long mask(String names) {
      long mask = 0;
      for (String name : names.split(",")) {
        Integer bit = bits.get(name);
        if (bit == null) {
          throw new IllegalArgumentException(name + " is not a flagged key");
        }
        mask |= 1L << bit;
      }
      return mask;
    }

    /** The flag one key sets. */
    long flag(String key) {
      Integer bit = bits.get(key);
      if (bit != null) {
        return 1L << bit;
      }
      return known.contains(key) ? 0 : 1L;
    }
  }
}
