package dev.rgd.client;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small, strict JSON (RFC 8259) reader and writer for rgd's API shapes.
 *
 * <p>Why here: the JDK has no JSON parser and the client must not pull in a jar. The API's
 * bodies are small objects of strings, integers, floats, booleans and nulls, so this maps
 * JSON onto plain Java values: objects become {@code Map<String, Object>} (insertion order
 * kept), arrays {@code List<Object>}, strings {@code String}, numbers without a fraction or
 * exponent {@code Long}, other numbers {@code Double}, {@code true}/{@code false}
 * {@code Boolean}, and {@code null} Java's null.
 *
 * <p>Strict: anything RFC 8259 does not allow is refused with {@link JsonException} naming
 * the offset: trailing commas, leading zeros, single quotes, comments, NaN/Infinity,
 * unescaped control characters, lone or misordered surrogate escapes, duplicate keys,
 * anything after the value, integers beyond a {@code long}, numbers that overflow a double,
 * and nesting deeper than {@link #MAX_DEPTH}.
 */
public final class Json {
    /** Deepest nesting of arrays and objects accepted: the API's bodies are three deep. */
    public static final int MAX_DEPTH = 64;

    private final String text;
    private int pos;

    private Json(String text) {
        this.text = text;
    }

    /** Refused input: the message names what is wrong and where. */
    public static final class JsonException extends IllegalArgumentException {
        private static final long serialVersionUID = 1L;

        JsonException(String message) {
            super(message);
        }
    }

    // -- reading -------------------------------------------------------------------------------

    /** Parse one JSON value (leading and trailing whitespace allowed, nothing else). */
    public static Object parse(String text) {
        if (text == null) {
            throw new JsonException("JSON: no input (null)");
        }
        Json p = new Json(text);
        p.skipWhitespace();
        Object value = p.value(0);
        p.skipWhitespace();
        if (p.pos != text.length()) {
            throw p.error("unexpected text after the JSON value");
        }
        return value;
    }

    /** Parse a JSON object: as {@link #parse}, refusing any other top-level value. */
    @SuppressWarnings("unchecked")
    public static Map<String, Object> parseObject(String text) {
        Object value = parse(text);
        if (!(value instanceof Map)) {
            throw new JsonException("JSON: expected an object at the top level, got " + typeName(value));
        }
        return (Map<String, Object>) value;
    }

    /** The JSON type name of a parsed value, for error messages. */
    public static String typeName(Object value) {
        if (value == null) {
            return "null";
        } else if (value instanceof Map) {
            return "object";
        } else if (value instanceof List) {
            return "array";
        } else if (value instanceof String) {
            return "string";
        } else if (value instanceof Boolean) {
            return "boolean";
        } else if (value instanceof Long) {
            return "integer";
        }
        return "number";
    }

    private JsonException error(String what) {
        return new JsonException("JSON: " + what + " at offset " + pos);
    }

    private void skipWhitespace() {
        while (pos < text.length()) {
            char c = text.charAt(pos);
            if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                return;
            }
            pos++;
        }
    }

    private Object value(int depth) {
        if (pos >= text.length()) {
            throw error("unexpected end of input, expected a value");
        }
        char c = text.charAt(pos);
        switch (c) {
            case '{':
                return object(depth + 1);
            case '[':
                return array(depth + 1);
            case '"':
                return string();
            case 't':
                literal("true");
                return Boolean.TRUE;
            case 'f':
                literal("false");
                return Boolean.FALSE;
            case 'n':
                literal("null");
                return null;
            default:
                if (c == '-' || (c >= '0' && c <= '9')) {
                    return number();
                }
                throw error("unexpected character '" + printable(c) + "', expected a value");
        }
    }

    private static String printable(char c) {
        return c < 0x20 || c > 0x7e ? String.format("\\u%04x", (int) c) : String.valueOf(c);
    }

    private void literal(String word) {
        if (!text.startsWith(word, pos)) {
            throw error("invalid literal, expected '" + word + "'");
        }
        pos += word.length();
    }

    private Map<String, Object> object(int depth) {
        if (depth > MAX_DEPTH) {
            throw error("nesting deeper than " + MAX_DEPTH);
        }
        pos++; // '{'
        Map<String, Object> map = new LinkedHashMap<>();
        skipWhitespace();
        if (pos < text.length() && text.charAt(pos) == '}') {
            pos++;
            return map;
        }
        while (true) {
            skipWhitespace();
            if (pos >= text.length() || text.charAt(pos) != '"') {
                throw error("expected a string key");
            }
            int keyAt = pos;
            String key = string();
            skipWhitespace();
            expect(':');
            skipWhitespace();
            Object v = value(depth);
            if (map.containsKey(key)) {
                pos = keyAt;
                throw error("duplicate key \"" + key + "\"");
            }
            map.put(key, v);
            skipWhitespace();
            if (pos >= text.length()) {
                throw error("unexpected end of input in an object");
            }
            char c = text.charAt(pos++);
            if (c == '}') {
                return map;
            }
            if (c != ',') {
                pos--;
                throw error("expected ',' or '}' in an object");
            }
        }
    }

    private List<Object> array(int depth) {
        if (depth > MAX_DEPTH) {
            throw error("nesting deeper than " + MAX_DEPTH);
        }
        pos++; // '['
        List<Object> list = new ArrayList<>();
        skipWhitespace();
        if (pos < text.length() && text.charAt(pos) == ']') {
            pos++;
            return list;
        }
        while (true) {
            skipWhitespace();
            list.add(value(depth));
            skipWhitespace();
            if (pos >= text.length()) {
                throw error("unexpected end of input in an array");
            }
            char c = text.charAt(pos++);
            if (c == ']') {
                return list;
            }
            if (c != ',') {
                pos--;
                throw error("expected ',' or ']' in an array");
            }
        }
    }

    private void expect(char c) {
        if (pos >= text.length() || text.charAt(pos) != c) {
            throw error("expected '" + c + "'");
        }
        pos++;
    }

    private String string() {
        pos++; // opening quote
        StringBuilder sb = null;
        int start = pos;
        while (true) {
            if (pos >= text.length()) {
                throw error("unterminated string");
            }
            char c = text.charAt(pos);
            if (c == '"') {
                String s = sb == null ? text.substring(start, pos) : sb.append(text, start, pos).toString();
                pos++;
                return s;
            }
            if (c < 0x20) {
                throw error("unescaped control character in a string");
            }
            if (c == '\\') {
                if (sb == null) {
                    sb = new StringBuilder();
                }
                sb.append(text, start, pos);
                escape(sb);
                start = pos;
                continue;
            }
            if (Character.isHighSurrogate(c)) {
                if (pos + 1 >= text.length() || !Character.isLowSurrogate(text.charAt(pos + 1))) {
                    throw error("unpaired surrogate in a string");
                }
                pos += 2;
                continue;
            }
            if (Character.isLowSurrogate(c)) {
                throw error("unpaired surrogate in a string");
            }
            pos++;
        }
    }

    private void escape(StringBuilder sb) {
        pos++; // backslash
        if (pos >= text.length()) {
            throw error("unterminated escape");
        }
        char c = text.charAt(pos++);
        switch (c) {
            case '"' -> sb.append('"');
            case '\\' -> sb.append('\\');
            case '/' -> sb.append('/');
            case 'b' -> sb.append('\b');
            case 'f' -> sb.append('\f');
            case 'n' -> sb.append('\n');
            case 'r' -> sb.append('\r');
            case 't' -> sb.append('\t');
            case 'u' -> {
                char u = hex4();
                if (Character.isHighSurrogate(u)) {
                    if (!text.startsWith("\\u", pos)) {
                        throw error("unpaired surrogate escape");
                    }
                    pos += 2;
                    char low = hex4();
                    if (!Character.isLowSurrogate(low)) {
                        throw error("unpaired surrogate escape");
                    }
                    sb.append(u).append(low);
                } else if (Character.isLowSurrogate(u)) {
                    throw error("unpaired surrogate escape");
                } else {
                    sb.append(u);
                }
            }
            default -> {
                pos--;
                throw error("invalid escape '\\" + printable(c) + "'");
            }
        }
    }

    private char hex4() {
        if (pos + 4 > text.length()) {
            throw error("truncated \\u escape");
        }
        int v = 0;
        for (int i = 0; i < 4; i++) {
            int d = Character.digit(text.charAt(pos + i), 16);
            if (d < 0) {
                throw error("invalid hex digit in a \\u escape");
            }
            v = v * 16 + d;
        }
        pos += 4;
        return (char) v;
    }

    private Object number() {
        int start = pos;
        if (text.charAt(pos) == '-') {
            pos++;
        }
        if (pos >= text.length()) {
            throw error("a number needs digits");
        }
        char c = text.charAt(pos);
        if (c == '0') {
            pos++;
            if (pos < text.length() && isDigit(text.charAt(pos))) {
                throw error("leading zero in a number");
            }
        } else if (c >= '1' && c <= '9') {
            digits();
        } else {
            throw error("a number needs digits");
        }
        boolean integral = true;
        if (pos < text.length() && text.charAt(pos) == '.') {
            integral = false;
            pos++;
            if (pos >= text.length() || !isDigit(text.charAt(pos))) {
                throw error("a fraction needs digits");
            }
            digits();
        }
        if (pos < text.length() && (text.charAt(pos) == 'e' || text.charAt(pos) == 'E')) {
            integral = false;
            pos++;
            if (pos < text.length() && (text.charAt(pos) == '+' || text.charAt(pos) == '-')) {
                pos++;
            }
            if (pos >= text.length() || !isDigit(text.charAt(pos))) {
                throw error("an exponent needs digits");
            }
            digits();
        }
        String literal = text.substring(start, pos);
        if (integral) {
            try {
                return Long.parseLong(literal);
            } catch (NumberFormatException e) {
                pos = start;
                throw error("integer out of range of a 64-bit long: " + literal);
            }
        }
        double d = Double.parseDouble(literal);
        if (Double.isInfinite(d)) {
            pos = start;
            throw error("number out of range of a double: " + literal);
        }
        return d;
    }

    private void digits() {
        while (pos < text.length() && isDigit(text.charAt(pos))) {
            pos++;
        }
    }

    private static boolean isDigit(char c) {
        return c >= '0' && c <= '9';
    }

    // -- writing -------------------------------------------------------------------------------

    /**
     * Compact JSON for a value made of maps with string keys, lists, strings, numbers
     * (integral types written as integers, finite doubles and floats), booleans and null.
     * Anything else, and NaN or infinite numbers, throw {@link JsonException}.
     */
    public static String write(Object value) {
        StringBuilder sb = new StringBuilder();
        write(sb, value, 0);
        return sb.toString();
    }

    /** Append {@code value}'s JSON to {@code sb} (as {@link #write}). */
    public static void write(StringBuilder sb, Object value) {
        write(sb, value, 0);
    }

    private static void write(StringBuilder sb, Object value, int depth) {
        if (depth > MAX_DEPTH) {
            throw new JsonException("JSON: nesting deeper than " + MAX_DEPTH + " (a cycle?)");
        }
        if (value == null) {
            sb.append("null");
        } else if (value instanceof String s) {
            writeString(sb, s);
        } else if (value instanceof Boolean b) {
            sb.append(b.booleanValue());
        } else if (value instanceof Long || value instanceof Integer || value instanceof Short
                || value instanceof Byte) {
            sb.append(((Number) value).longValue());
        } else if (value instanceof Double || value instanceof Float) {
            double d = ((Number) value).doubleValue();
            if (Double.isNaN(d) || Double.isInfinite(d)) {
                throw new JsonException("JSON: " + d + " has no JSON form");
            }
            if (d == Math.rint(d) && Math.abs(d) < 1e15) {
                sb.append((long) d).append(".0");
            } else {
                sb.append(d);
            }
        } else if (value instanceof Map<?, ?> map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : map.entrySet()) {
                if (!(e.getKey() instanceof String key)) {
                    throw new JsonException("JSON: object keys must be strings, got " + e.getKey());
                }
                if (!first) {
                    sb.append(',');
                }
                first = false;
                writeString(sb, key);
                sb.append(':');
                write(sb, e.getValue(), depth + 1);
            }
            sb.append('}');
        } else if (value instanceof List<?> list) {
            sb.append('[');
            for (int i = 0; i < list.size(); i++) {
                if (i > 0) {
                    sb.append(',');
                }
                write(sb, list.get(i), depth + 1);
            }
            sb.append(']');
        } else {
            throw new JsonException("JSON: cannot write a " + value.getClass().getName());
        }
    }

    private static final char[] HEX = "0123456789abcdef".toCharArray();

    /** Append {@code s} as a JSON string: quotes, backslashes and control characters escaped. */
    public static void writeString(StringBuilder sb, String s) {
        sb.append('"');
        int start = 0;
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c >= 0x20 && c != '"' && c != '\\' && c != 0x2028 && c != 0x2029) {
                continue;
            }
            sb.append(s, start, i);
            switch (c) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                case '\b' -> sb.append("\\b");
                case '\f' -> sb.append("\\f");
                default -> sb.append("\\u").append(HEX[c >> 12 & 15]).append(HEX[c >> 8 & 15])
                        .append(HEX[c >> 4 & 15]).append(HEX[c & 15]);
            }
            start = i + 1;
        }
        sb.append(s, start, s.length()).append('"');
    }
}
