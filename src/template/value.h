// The engine's values: what Jinja expressions compute, modelled on the Python objects a
// chat template sees under jinja2 (JSON-like data plus the few objects templates create).
//
//   undefined   jinja2.Undefined: a missing variable, key, attribute or index. Prints as "",
//               is false, iterates as empty; most other uses are an error naming what was
//               missing (the hint). An "unsafe" undefined is what the sandbox returns for a
//               refused attribute (list.append, __class__, …): calling it is a SecurityError.
//   none, bool, int (int64; overflow is an error, Python would grow), float (double)
//   string      UTF-8 text with per-byte provenance (MarkedText) and markupsafe's "safe" bit.
//   list        a sequence of one of the kinds below (SeqKind): list, tuple, a one-shot
//               iterator (the generators of map/select/… and reversed(): no len(), not JSON,
//               always true; iterating consumes it), or a dict view (dict.items/keys/values:
//               len() works, not JSON).
//   dict        insertion-ordered (Python 3.7+), keys compared with Python equality.
//   object      namespace, macro, loop, builtin functions and bound methods (template/objects.h).
//
// Lists and dicts are immutable once built (the reference sandbox refuses every mutating
// method), so values share them by pointer; only namespaces (`{% set ns.x = … %}`) and
// iterator positions change. Containers record their nesting depth, which the engine bounds
// (kMaxValueDepth) so that no recursive walk — repr, tojson, comparison, destruction —
// can exhaust the stack.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "template/marked_text.h"

namespace ubatch::jinja {

class State;
class Value;

// Deepest nesting of lists, dicts and namespaces a render may build (Value::list/dict and
// namespace assignment refuse deeper ones with a kLimit error).
inline constexpr uint32_t kMaxValueDepth = 200;

// Arguments of a call: positional, then keyword (name, value) in call order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct StringData {
  MarkedText text;
  bool safe = false;  // markupsafe.Markup (|safe, |escape): `+` with a plain str escapes it
};

enum class SeqKind : uint8_t { kList, kTuple, kIterator, kItemsView, kKeysView, kValuesView };

struct ListData {
  std::vector<Value> items;
  SeqKind kind = SeqKind::kList;
  uint32_t depth = 1;        // 1 + the deepest element
  mutable size_t next = 0;   // kIterator: items before `next` are consumed
  std::string pending_error;  // kIterator: raised when consumed (a generator that fails lazily)
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;  // in insertion order, keys unique
  uint32_t depth = 1;
  const Value* find(std::string_view key) const;  // string key
  const Value* find(const Value& key) const;      // Python equality (1 == 1.0 == True)
};

// Objects created by the engine (objects.h): polymorphic, shared, possibly mutable.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string_view type_name() const = 0;  // Python's type name, for messages
  virtual std::string repr() const;
  virtual bool callable() const { return false; }
  // Default: "'<type>' object is not callable".
  virtual Value call(State& st, CallArgs& args);
  // Attribute access (obj.name); default: undefined.
  virtual Value attribute(State& st, std::string_view name);
  virtual uint32_t depth() const { return 1; }
  // Drops held values at the end of a render (breaks reference cycles: a namespace holding
  // itself, a macro stored in the scope it captured).
  virtual void release() {}
};

class Value {
 public:
  enum class Type : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kObject };

  Value() = default;  // undefined, no hint
  static Value undefined(std::string hint, bool unsafe = false);
  static Value none() { return Value(Type::kNone); }
  static Value boolean(bool b) {
    Value v(Type::kBool);
    v.b_ = b;
    return v;
  }
  static Value integer(int64_t i) {
    Value v(Type::kInt);
    v.i_ = i;
    return v;
  }
  static Value number(double f) {
    Value v(Type::kFloat);
    v.f_ = f;
    return v;
  }
  static Value string(MarkedText text, bool safe = false);
  static Value literal(std::string_view s) { return string(MarkedText::literal(s)); }
  static Value data(std::string_view s) { return string(MarkedText::data(s)); }
  // Containers: depth is computed from the items; deeper than kMaxValueDepth is a kLimit error.
  static Value list(std::vector<Value> items, SeqKind kind = SeqKind::kList);
  // An iterator whose consumption raises `message` (kRuntime), as a Python generator that
  // fails only when iterated.
  static Value failing_iterator(std::string message);
  static Value dict(std::vector<std::pair<Value, Value>> items);  // keys must be unique
  static Value object(std::shared_ptr<Object> obj);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_float() const { return type_ == Type::kFloat; }
  bool is_number() const { return type_ == Type::kInt || type_ == Type::kFloat || type_ == Type::kBool; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_dict() const { return type_ == Type::kDict; }
  bool is_object() const { return type_ == Type::kObject; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }      // kInt (kBool reads as 0/1 through to_int)
  double as_float() const { return f_; }
  int64_t to_int() const { return type_ == Type::kBool ? (b_ ? 1 : 0) : i_; }  // bool or int
  double to_float() const { return type_ == Type::kFloat ? f_ : static_cast<double>(to_int()); }

  const StringData& str_data() const { return *static_cast<const StringData*>(ptr_.get()); }
  const MarkedText& text() const { return str_data().text; }
  const std::string& str() const { return str_data().text.str(); }
  bool is_safe() const { return type_ == Type::kString && str_data().safe; }

  const ListData& list_data() const { return *static_cast<const ListData*>(ptr_.get()); }
  const std::vector<Value>& items() const { return list_data().items; }
  SeqKind seq_kind() const { return list_data().kind; }
  bool is_iterator() const { return type_ == Type::kList && list_data().kind == SeqKind::kIterator; }

  const DictData& dict_data() const { return *static_cast<const DictData*>(ptr_.get()); }

  Object& obj() const { return *static_cast<Object*>(ptr_.get()); }
  std::shared_ptr<Object> obj_ptr() const { return std::static_pointer_cast<Object>(ptr_); }
  // The object if it is of type T, else null.
  template <typename T>
  T* object_as() const {
    return type_ == Type::kObject ? dynamic_cast<T*>(static_cast<Object*>(ptr_.get())) : nullptr;
  }

  // Undefined: what was missing ("'x' is undefined", "'dict object' has no attribute 'y'").
  std::string undefined_hint() const;
  bool undefined_is_unsafe() const { return type_ == Type::kUndefined && b_; }

  // Nesting depth: 0 for scalars, ListData/DictData::depth, Object::depth.
  uint32_t depth() const;
  // Whether two values are the same object (Python `is`; scalars compare by value).
  bool same_as(const Value& o) const;

 private:
  explicit Value(Type t) : type_(t) {}
  Type type_ = Type::kUndefined;
  bool b_ = false;  // kBool; kUndefined: unsafe
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<void> ptr_;  // StringData, ListData, DictData, Object, or the undefined hint (std::string)
};

// Throws kLimit when a container of this depth would exceed kMaxValueDepth.
void check_nesting(uint32_t depth);

// Python's type name of a value ("str", "int", "NoneType", "dict_items", …), for messages.
std::string type_name(const Value& v);

}  // namespace ubatch::jinja
