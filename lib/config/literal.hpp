// Internal to lib/config: keys and values written as TOML and JSON
// literals, shared by Schema::describe(), error messages and
// Config::to_toml()/to_json(); and the abort for programming errors.
// Thread-safety: no shared state.
#pragma once

#include <string>
#include <string_view>

#include "config/config.hpp"

namespace rdtx::config::detail {

// True if `s` is a TOML bare key ([A-Za-z0-9_-]+). Schema paths are made of
// bare keys only, so that a dotted path has one meaning and keys and section
// headers are written without quotes.
bool is_bare_key(std::string_view s);

// A double-quoted string using only the escapes TOML basic strings and JSON
// share (\" \\ \b \t \n \f \r \uXXXX), so the result is valid in both.
// `s` must be valid UTF-8; non-ASCII characters are copied as they are.
std::string quote(std::string_view s);

// The shortest text that reads back as exactly `v`, always with a '.' or an
// exponent so TOML reads it as a float: "0.1", "1.0", "1e+300", "inf", "nan".
std::string float_literal(double v);

std::string toml_literal(const Value& v);
// As toml_literal(), except that infinities and NaN become quoted strings.
std::string json_literal(const Value& v);

// Prints "rdtx::config: <message>" and aborts. For programming errors (a
// bad declaration, a getter given an undeclared path): found on the first
// run of any binary that has them, and fixed in the code, not by the user.
// Always on, NDEBUG or not: this is setup code.
[[noreturn, gnu::format(printf, 1, 2)]] void die(const char* fmt, ...);

}  // namespace rdtx::config::detail
