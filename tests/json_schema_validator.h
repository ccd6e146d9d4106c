// A JSON Schema validator for the keywords coordinator/structured/json_schema.h supports,
// with JSON Schema's own meaning (oneOf: exactly one branch; no additionalProperties: any
// extra key is fine), plus an option for the compiler's stricter promise (objects with
// `properties` have no other keys). Test-only: tests/structured_output_*_test.cc check with
// it that every generated output validates.
#pragma once

#include <cmath>
#include <regex>
#include <string>

#include "nlohmann/json.hpp"

namespace tpserve::testing_json {

class SchemaValidator {
 public:
  explicit SchemaValidator(const nlohmann::json& root, bool closed_objects = true)
      : root_(root), closed_objects_(closed_objects) {}

  // Empty when `value` validates; else what failed, with the schema path.
  std::string Check(const nlohmann::json& value) const { return Check(value, root_, "#"); }

 private:
  using Json = nlohmann::json;

  static size_t CodePoints(const std::string& s) {
    size_t n = 0;
    for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
  }

  static bool HasType(const Json& v, const std::string& type) {
    if (type == "string") return v.is_string();
    if (type == "number") return v.is_number();
    if (type == "integer") {
      if (v.is_number_integer()) return true;
      return v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>());
    }
    if (type == "boolean") return v.is_boolean();
    if (type == "null") return v.is_null();
    if (type == "object") return v.is_object();
    if (type == "array") return v.is_array();
    return false;
  }

  const Json& Resolve(const std::string& pointer) const {
    const Json* at = &root_;
    size_t pos = 1;
    while (pos < pointer.size()) {
      const size_t end = std::min(pointer.find('/', pos + 1), pointer.size());
      std::string token;
      for (size_t i = pos + 1; i < end; ++i) {
        if (pointer[i] == '~' && i + 1 < end) {
          token.push_back(pointer[++i] == '0' ? '~' : '/');
        } else {
          token.push_back(pointer[i]);
        }
      }
      at = at->is_array() ? &(*at)[std::stoul(token)] : &(*at)[token];
      pos = end;
    }
    return *at;
  }

  std::string Check(const Json& v, const Json& s, const std::string& path) const {
    if (s.is_boolean()) return s.get<bool>() ? "" : path + ": false schema";
    if (s.contains("$ref")) return Check(v, Resolve(s["$ref"].get<std::string>()), s["$ref"].get<std::string>());
    if (s.contains("allOf")) {
      for (size_t i = 0; i < s["allOf"].size(); ++i) {
        if (auto e = Check(v, s["allOf"][i], path + "/allOf/" + std::to_string(i)); !e.empty()) return e;
      }
    }
    if (s.contains("anyOf")) {
      bool any = false;
      for (const Json& b : s["anyOf"]) any = any || Check(v, b, path).empty();
      if (!any) return path + ": no anyOf branch matches";
    }
    if (s.contains("oneOf")) {
      int n = 0;
      for (const Json& b : s["oneOf"]) n += Check(v, b, path).empty();
      if (n != 1) return path + ": " + std::to_string(n) + " oneOf branches match";
    }
    if (s.contains("type")) {
      bool ok = false;
      if (s["type"].is_string()) {
        ok = HasType(v, s["type"]) || (s["type"] == "json_object" && v.is_object());
      } else {
        for (const Json& t : s["type"]) ok = ok || HasType(v, t);
      }
      if (!ok) return path + ": type " + s["type"].dump() + " does not match " + v.dump();
    }
    if (s.contains("enum")) {
      bool found = false;
      for (const Json& e : s["enum"]) found = found || e == v;
      if (!found) return path + ": not in enum";
    }
    if (s.contains("const") && s["const"] != v) return path + ": not the const";
    if (v.is_object()) {
      if (s.contains("required")) {
        for (const Json& k : s["required"]) {
          if (!v.contains(k.get<std::string>())) return path + ": missing " + k.get<std::string>();
        }
      }
      const bool has_props = s.contains("properties");
      for (const auto& [key, item] : v.items()) {
        if (has_props && s["properties"].contains(key)) {
          if (auto e = Check(item, s["properties"][key], path + "/properties/" + key); !e.empty()) return e;
        } else if (s.contains("additionalProperties") && s["additionalProperties"] == false) {
          return path + ": extra key " + key;
        } else if (has_props && closed_objects_) {
          return path + ": extra key " + key + " (closed objects)";
        }
      }
    }
    if (v.is_array()) {
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return path + ": too few items";
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return path + ": too many items";
      if (s.contains("items")) {
        for (size_t i = 0; i < v.size(); ++i) {
          if (auto e = Check(v[i], s["items"], path + "/items"); !e.empty()) return e;
        }
      }
    }
    if (v.is_string()) {
      const std::string str = v.get<std::string>();
      if (s.contains("minLength") && CodePoints(str) < s["minLength"].get<size_t>()) return path + ": too short";
      if (s.contains("maxLength") && CodePoints(str) > s["maxLength"].get<size_t>()) return path + ": too long";
      if (s.contains("pattern") &&
          !std::regex_search(str, std::regex(s["pattern"].get<std::string>(), std::regex::ECMAScript))) {
        return path + ": " + v.dump() + " does not match pattern " + s["pattern"].dump();
      }
    }
    return "";
  }

  const Json root_;
  bool closed_objects_;
};

}  // namespace tpserve::testing_json
