package cloudtrail;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonLocation;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadConstraints;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

/**
 * A container Spark's parser rejected whole, split into its records, each to parse or to quarantine with its
 * reason (jobs/decode.py, docs/design.md "Records the parser cannot take"), so that one bad record costs one record.
 *
 * <p>A tokenizer finds the {@code Records} array of a {"Records":[...]} object, or a bare array, and its elements
 * without parsing them; each element is then checked alone: its nesting, its longest string, and strict JSON. It
 * runs in the JVM, in the parse's own stage, and only on such containers: every other file hands it a null.
 *
 * <p>Returns null when the text holds no records array, when anything but white space follows the container (a
 * second container must not be dropped), or when no element is a record that parses: the file then keeps its
 * file-level reason.
 */
public final class Salvage implements UDF2<String, String, List<Row>> {
  private static final long serialVersionUID = 1L;

  /** Spark's parser's levels, less the container's two. */
  static final int MAX_RECORD_DEPTH = LandingFile.MAX_DEPTH - 2;

  static final int MAX_STRING_CHARS = LandingFile.MAX_STRING_CHARS;

  // Strict JSON, as Python's json module reads it: no NaN, no raw control characters, numbers and names of any
  // length; the depth and string limits are checked before the parse, with reasons of their own.
  private static final JsonFactory JSON =
      JsonFactory.builder()
          .streamReadConstraints(
              StreamReadConstraints.builder()
                  .maxNestingDepth(LandingFile.MAX_DEPTH)
                  .maxStringLength(MAX_STRING_CHARS)
                  .maxNumberLength(Integer.MAX_VALUE)
                  .maxNameLength(Integer.MAX_VALUE)
                  .build())
          .build();

  private static final Pattern NON_STANDARD = Pattern.compile("Non-standard token '(NaN|Infinity|-Infinity)'");
  private static final Pattern CONTROL = Pattern.compile("Illegal unquoted character \\(\\(CTRL-CHAR, code (\\d+)\\)\\)");
  private static final Pattern SOURCE = Pattern.compile("\\s*\\(?(start marker )?at \\[Source.*", Pattern.DOTALL);

  /** Arguments: the container's text, and the keys that make a JSON object a CloudTrail record, comma-separated. */
  @Override
  public List<Row> call(String text, String markers) {
    return text == null ? null : split(text, Set.of(markers.split(",")));
  }

  static List<Row> split(String text, Set<String> markers) {
    Tokens tokens = new Tokens(text, 0);
    int start = -1;
    int containerDepth = 0;
    int depth = 0;
    String previous = "";
    String last = "";
    while (tokens.next()) {
      String token = tokens.text();
      if (token.equals("[") && (depth == 0 || (depth == 1 && previous.equals("\"Records\"") && last.equals(":")))) {
        start = tokens.end;
        containerDepth = depth;
        break;
      }
      depth += open(token) - close(token);
      previous = last;
      last = token;
    }
    if (start < 0) {
      return null;
    }
    List<Row> records = new ArrayList<>();
    depth = 0;
    int deepest = 0;
    long longest = 0;
    int begin = start;
    boolean closed = false;
    tokens = new Tokens(text, start);
    while (tokens.next()) {
      char first = text.charAt(tokens.start);
      if (first == '"') {
        longest = Math.max(longest, text.codePointCount(tokens.start, tokens.end) - 2);
      } else if (first == '{' || first == '[') {
        depth++;
        deepest = Math.max(deepest, depth);
      } else if (first == '}' || first == ']') {
        if (depth == 0) { // the end of the records array
          add(records, text.substring(begin, tokens.start), deepest, longest);
          if (!oneValueAfter(text, tokens.end, containerDepth)) {
            return null;
          }
          closed = true;
          break;
        }
        depth--;
      } else if (first == ',' && depth == 0) {
        add(records, text.substring(begin, tokens.start), deepest, longest);
        begin = tokens.end;
        deepest = 0;
        longest = 0;
      }
    }
    if (!closed) { // cut off before the array closed: what is there, record by record
      add(records, text.substring(begin), deepest, longest);
    }
    // With no record to save (a missing comma glues them all into one), the file keeps its file-level reason.
    for (Row record : records) {
      if (record.isNullAt(1) && looksLikeRecord(record.getString(0), markers)) {
        return records;
      }
    }
    return null;
  }

  private static void add(List<Row> records, String element, int depth, long longest) {
    String text = strip(element);
    if (text.isEmpty()) {
      return;
    }
    if (depth > MAX_RECORD_DEPTH) {
      records.add(RowFactory.create(text, "record_too_deep",
          "nested " + depth + " levels; a record may nest " + MAX_RECORD_DEPTH));
    } else if (longest > MAX_STRING_CHARS) {
      records.add(RowFactory.create(text, "record_too_large",
          "holds a string of " + longest + " characters; a record's strings may hold " + MAX_STRING_CHARS));
    } else {
      String problem = jsonProblem(text);
      records.add(RowFactory.create(text, problem == null ? null : "invalid_json", problem));
    }
  }

  /** Why `text` is not exactly one strict JSON value, or null. */
  static String jsonProblem(String text) {
    try (JsonParser parser = JSON.createParser(text)) {
      if (parser.nextToken() == null) {
        return "Expecting value: the record is empty";
      }
      parser.skipChildren();
      if (parser.nextToken() != null) {
        return "Extra data after the value, at char " + parser.currentTokenLocation().getCharOffset();
      }
      return null;
    } catch (JsonProcessingException e) {
      return describe(e);
    } catch (IOException e) {
      return e.getClass().getSimpleName() + ": " + e.getMessage();
    }
  }

  /** The parser's complaint in a line of its own words, without the source it quotes; at most 300 characters. */
  private static String describe(JsonProcessingException e) {
    String message = String.valueOf(e.getOriginalMessage());
    JsonLocation at = e.getLocation();
    String where = at == null ? "" : " at: line " + at.getLineNr() + " column " + at.getColumnNr() + " (char " + at.getCharOffset() + ")";
    Matcher nonStandard = NON_STANDARD.matcher(message);
    Matcher control = CONTROL.matcher(message);
    String detail;
    if (nonStandard.find()) {
      detail = nonStandard.group(1) + " is not a JSON value";
    } else if (control.find()) {
      detail = "Invalid control character (code " + control.group(1) + ")" + where;
    } else {
      detail = SOURCE.matcher(message.lines().findFirst().orElse("")).replaceFirst("") + where;
    }
    return detail.length() > 300 ? detail.substring(0, 300) : detail;
  }

  /** A JSON object with a key only CloudTrail records have (`text` parses). */
  private static boolean looksLikeRecord(String text, Set<String> markers) {
    try (JsonParser parser = JSON.createParser(text)) {
      if (parser.nextToken() != JsonToken.START_OBJECT) {
        return false;
      }
      while (parser.nextToken() == JsonToken.FIELD_NAME) {
        if (markers.contains(parser.currentName())) {
          return true;
        }
        parser.nextToken();
        parser.skipChildren();
      }
      return false;
    } catch (IOException e) {
      return false;
    }
  }

  /** Whether the container closes after `position` (at `depth`) with nothing but white space after it. */
  private static boolean oneValueAfter(String text, int position, int depth) {
    if (depth > 0) {
      Tokens tokens = new Tokens(text, position);
      while (tokens.next()) {
        String token = tokens.text();
        depth += open(token) - close(token);
        if (depth == 0) {
          position = tokens.end;
          break;
        }
      }
    }
    return depth == 0 && strip(text.substring(position)).isEmpty();
  }

  private static int open(String token) {
    return token.equals("{") || token.equals("[") ? 1 : 0;
  }

  private static int close(String token) {
    return token.equals("}") || token.equals("]") ? 1 : 0;
  }

  /** White space as Python's str.strip() takes it, which the splitter this replaced used. */
  static String strip(String text) {
    int begin = 0;
    int end = text.length();
    while (begin < end && isSpace(text.charAt(begin))) {
      begin++;
    }
    while (end > begin && isSpace(text.charAt(end - 1))) {
      end--;
    }
    return text.substring(begin, end);
  }

  private static boolean isSpace(char c) {
    return Character.isWhitespace(c) || Character.isSpaceChar(c) || c == '\u0085';
  }

  /**
   * The tokens a split needs: a complete JSON string (with its quotes) or one structural character; everything
   * else is passed over. A quote whose string never closes is passed over alone, and the scan goes on after it.
   */
  private static final class Tokens {
    private final String text;
    int start;
    int end;
    // Once a string never closes, none after it does (every later quote was an escaped one in that scan): each
    // later quote is passed over alone, without scanning to the end again.
    private boolean unclosed;

    Tokens(String text, int from) {
      this.text = text;
      this.end = from;
    }

    boolean next() {
      int n = text.length();
      for (int i = end; i < n; i++) {
        char c = text.charAt(i);
        if (c == '[' || c == ']' || c == '{' || c == '}' || c == ',' || c == ':') {
          start = i;
          end = i + 1;
          return true;
        }
        if (c == '"' && !unclosed) {
          int close = closingQuote(i);
          if (close >= 0) {
            start = i;
            end = close + 1;
            return true;
          }
        }
      }
      end = n;
      return false;
    }

    private int closingQuote(int quote) {
      int n = text.length();
      int j = quote + 1;
      while (j < n) {
        char c = text.charAt(j);
        if (c == '"') {
          return j;
        }
        j += c == '\\' ? 2 : 1;
      }
      unclosed = true;
      return -1;
    }

    String text() {
      return text.substring(start, end);
    }
  }
}
