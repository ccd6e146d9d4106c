// HTML/XML text escaping as Jinja's (markupsafe's) `escape` does it: & < > " ' become
// entity references. Valid in XML too. Used by the chat-template engine's `escape` filter
// and autoescaping, and by tpbench's SVG charts. Tested by tests/chat_template_test.cc.
#pragma once

#include <string>
#include <string_view>

namespace tpserve {

inline std::string HtmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace tpserve
