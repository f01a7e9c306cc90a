// Runs the cases of cases.json through Kafka Connect's own transforms and
// predicates (and Debezium's ExtractNewRecordState), as a Connect worker's
// transformation chain does after its JsonConverter, and prints what comes
// out, rendered as conformance_test.go renders txsink's records. See
// regen.sh; the output is expected.json.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.math.BigDecimal;
import java.util.*;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.connect.data.*;
import org.apache.kafka.connect.header.ConnectHeaders;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.sink.SinkRecord;
import org.apache.kafka.connect.transforms.Transformation;
import org.apache.kafka.connect.transforms.predicates.Predicate;

public class Harness {
    static final ObjectMapper OM = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        JsonNode cases = OM.readTree(new File(args[0]));
        ArrayNode out = OM.createArrayNode();
        for (JsonNode c : cases) {
            out.add(run(c));
        }
        System.out.println(OM.writerWithDefaultPrettyPrinter().writeValueAsString(out));
    }

    static Map<String, String> under(Map<String, String> cfg, String prefix) {
        Map<String, String> m = new HashMap<>();
        for (Map.Entry<String, String> e : cfg.entrySet()) {
            if (e.getKey().startsWith(prefix)) {
                m.put(e.getKey().substring(prefix.length()), e.getValue());
            }
        }
        m.remove("type");
        m.remove("predicate");
        m.remove("negate");
        return m;
    }

    static List<String> list(String s) {
        List<String> out = new ArrayList<>();
        if (s == null) return out;
        for (String p : s.split(",")) {
            if (!p.trim().isEmpty()) out.add(p.trim());
        }
        return out;
    }

    @SuppressWarnings({"unchecked", "rawtypes"})
    static ObjectNode run(JsonNode c) {
        ObjectNode res = OM.createObjectNode();
        res.put("name", c.get("name").asText());
        try {
            Map<String, String> cfg = new HashMap<>();
            c.get("config").fields().forEachRemaining(e -> cfg.put(e.getKey(), e.getValue().asText()));
            boolean schemas = c.path("schemas").asBoolean(false);
            JsonConverter kc = new JsonConverter();
            kc.configure(Map.of("schemas.enable", String.valueOf(schemas)), true);
            JsonConverter vc = new JsonConverter();
            vc.configure(Map.of("schemas.enable", String.valueOf(schemas)), false);
            String topic = c.get("topic").asText();
            byte[] kb = c.path("key").isMissingNode() || c.get("key").isNull() ? null : OM.writeValueAsBytes(c.get("key"));
            byte[] vb = c.path("value").isMissingNode() || c.get("value").isNull() ? null : OM.writeValueAsBytes(c.get("value"));
            SchemaAndValue k = kc.toConnectData(topic, kb);
            SchemaAndValue v = vc.toConnectData(topic, vb);
            ConnectHeaders headers = new ConnectHeaders();
            c.path("headers").fields().forEachRemaining(e -> headers.addString(e.getKey(), e.getValue().asText()));
            SinkRecord r = new SinkRecord(topic, c.path("partition").asInt(0), k.schema(), k.value(), v.schema(), v.value(),
                    c.path("offset").asLong(0), c.path("timestamp").asLong(0), TimestampType.CREATE_TIME, headers);

            Map<String, Predicate> preds = new HashMap<>();
            for (String a : list(cfg.get("predicates"))) {
                Predicate p = (Predicate) Class.forName(cfg.get("predicates." + a + ".type")).getDeclaredConstructor().newInstance();
                p.configure(under(cfg, "predicates." + a + "."));
                preds.put(a, p);
            }
            for (String a : list(cfg.get("transforms"))) {
                String prefix = "transforms." + a + ".";
                Transformation t = (Transformation) Class.forName(cfg.get(prefix + "type")).getDeclaredConstructor().newInstance();
                t.configure(under(cfg, prefix));
                String pn = cfg.get(prefix + "predicate");
                boolean negate = Boolean.parseBoolean(cfg.getOrDefault(prefix + "negate", "false"));
                if (pn != null && preds.get(pn).test(r) == negate) {
                    continue;
                }
                r = (SinkRecord) t.apply(r);
                if (r == null) {
                    res.put("dropped", true);
                    return res;
                }
            }
            res.put("topic", r.topic());
            res.set("key_schema", schema(r.keySchema()));
            res.set("key", value(r.keySchema(), r.key()));
            res.set("value_schema", schema(r.valueSchema()));
            res.set("value", value(r.valueSchema(), r.value()));
            ObjectNode hs = OM.createObjectNode();
            for (Header h : r.headers()) {
                hs.put(h.key(), h.value() == null ? null : String.valueOf(h.value()));
            }
            res.set("headers", hs);
        } catch (Exception e) {
            res.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
        }
        return res;
    }

    static JsonNode schema(Schema s) {
        if (s == null) return OM.nullNode();
        ObjectNode n = OM.createObjectNode();
        n.put("type", s.type().getName());
        n.put("optional", s.isOptional());
        if (s.name() != null) n.put("name", s.name());
        if (s.version() != null) n.put("version", s.version());
        if (s.parameters() != null && !s.parameters().isEmpty()) n.set("parameters", OM.valueToTree(new TreeMap<>(s.parameters())));
        switch (s.type()) {
            case STRUCT:
                ArrayNode fs = n.putArray("fields");
                for (Field f : s.fields()) {
                    ObjectNode fn = OM.createObjectNode();
                    fn.put("name", f.name());
                    fn.set("schema", schema(f.schema()));
                    fs.add(fn);
                }
                break;
            case ARRAY:
                n.set("items", schema(s.valueSchema()));
                break;
            case MAP:
                n.set("keys", schema(s.keySchema()));
                n.set("values", schema(s.valueSchema()));
                break;
            default:
        }
        return n;
    }

    @SuppressWarnings("unchecked")
    static JsonNode value(Schema s, Object v) {
        if (v == null) return OM.nullNode();
        if (v instanceof java.util.Date) {
            ObjectNode n = OM.createObjectNode();
            n.put("$instant", ((java.util.Date) v).getTime());
            return n;
        }
        if (v instanceof BigDecimal) {
            ObjectNode n = OM.createObjectNode();
            n.put("$decimal", ((BigDecimal) v).toPlainString());
            return n;
        }
        if (v instanceof Struct) {
            Struct st = (Struct) v;
            ObjectNode n = OM.createObjectNode();
            ArrayNode fs = n.putArray("$struct");
            for (Field f : st.schema().fields()) {
                ArrayNode pair = OM.createArrayNode();
                pair.add(f.name());
                pair.add(value(f.schema(), st.getWithoutDefault(f.name())));
                fs.add(pair);
            }
            return n;
        }
        if (v instanceof Map) {
            // Schemaless maps have no order: keys sorted.
            ObjectNode n = OM.createObjectNode();
            TreeMap<String, Object> sorted = new TreeMap<>();
            for (Map.Entry<Object, Object> e : ((Map<Object, Object>) v).entrySet()) {
                sorted.put(String.valueOf(e.getKey()), e.getValue());
            }
            for (Map.Entry<String, Object> e : sorted.entrySet()) {
                n.set(e.getKey(), value(s == null ? null : s.valueSchema(), e.getValue()));
            }
            return n;
        }
        if (v instanceof List) {
            ArrayNode a = OM.createArrayNode();
            for (Object e : (List<Object>) v) {
                a.add(value(s == null ? null : s.valueSchema(), e));
            }
            return a;
        }
        if (v instanceof byte[]) {
            return OM.getNodeFactory().textNode(Base64.getEncoder().encodeToString((byte[]) v));
        }
        return OM.valueToTree(v);
    }
}
