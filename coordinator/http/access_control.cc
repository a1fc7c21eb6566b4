#include "coordinator/http/access_control.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <fstream>
#include <sstream>

#include "common/base/error.h"

namespace pstrain {

namespace {

std::array<uint8_t, 32> digest(std::string_view text) {
  std::array<uint8_t, 32> out{};
  unsigned int n = 0;
  EVP_Digest(text.data(), text.size(), out.data(), &n, EVP_sha256(), nullptr);
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

const char* role_name(Role role) {
  switch (role) {
    case Role::kViewer: return "viewer";
    case Role::kOperator: return "operator";
    case Role::kAdmin: return "admin";
  }
  return "?";
}

AccessTokens AccessTokens::parse(std::string_view text, const std::string& source) {
  AccessTokens out;
  size_t line_number = 0;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = trim(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    ++line_number;
    if (line.empty() || line.front() == '#') continue;
    const std::string where = source + ":" + std::to_string(line_number) + ": ";
    std::vector<std::string_view> fields;
    for (std::string_view rest = line;;) {
      const size_t comma = rest.find(',');
      fields.push_back(trim(rest.substr(0, comma)));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    if (fields.size() < 2 || fields.size() > 3) {
      throw Error(where + "expected TOKEN,ROLE[,NAME] (" + std::to_string(fields.size()) + " fields)");
    }
    const std::string_view token = fields[0];
    if (token.size() < 16 || token.size() > 256) {
      throw Error(where + "the token has " + std::to_string(token.size()) + " characters; 16 to 256 are allowed");
    }
    for (unsigned char c : token) {
      if (c <= 0x20 || c >= 0x7f) throw Error(where + "the token holds a space or a character that is not printable ASCII");
    }
    Entry e;
    if (fields[1] == "admin") e.role = Role::kAdmin;
    else if (fields[1] == "operator") e.role = Role::kOperator;
    else if (fields[1] == "viewer") e.role = Role::kViewer;
    else throw Error(where + "unknown role '" + std::string(fields[1]) + "' (known: admin, operator, viewer)");
    e.name = fields.size() == 3 && !fields[2].empty() ? std::string(fields[2]) : "line " + std::to_string(line_number);
    e.hash = digest(token);
    for (const Entry& other : out.entries_) {
      if (other.hash == e.hash) throw Error(where + "the same token as " + other.name);
    }
    out.entries_.push_back(std::move(e));
  }
  if (out.entries_.empty()) throw Error(source + ": no tokens (an empty tokens file would lock everyone out)");
  return out;
}

AccessTokens AccessTokens::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read the tokens file " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

std::optional<AccessTokens::Match> AccessTokens::find(std::string_view token) const {
  const std::array<uint8_t, 32> h = digest(token);
  const Entry* found = nullptr;
  for (const Entry& e : entries_) {  // every entry, whatever matches: the time says nothing
    if (CRYPTO_memcmp(e.hash.data(), h.data(), h.size()) == 0) found = &e;
  }
  if (found == nullptr) return std::nullopt;
  return Match{found->role, found->name};
}

std::optional<Role> required_role(const std::string& method, const std::vector<std::string>& p) {
  const bool read = method == "GET" || method == "HEAD";
  if (read && p.size() == 1 && p[0] == "healthz") return std::nullopt;
  if (read && (p.empty() || p[0] == "ui")) return std::nullopt;  // the dashboard's files
  if (read) return Role::kViewer;
  if (method == "DELETE") return Role::kAdmin;
  if (method == "POST" && p.size() >= 3 && p[0] == "v1") {
    // Predictions and evaluations compute; they change nothing.
    if (p.size() == 3 && p[1] == "models" && (p[2].ends_with(":predict") || p[2].ends_with(":evaluate"))) return Role::kViewer;
    if (p.size() == 4 && p[1] == "jobs" && p[3] == "evaluate") return Role::kViewer;
  }
  if (method == "POST" || method == "PUT") return Role::kOperator;
  return Role::kViewer;  // any other method: answered 405 (or 404) once the caller is known
}

}  // namespace pstrain
