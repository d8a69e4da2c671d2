#include "template/value.h"

#include <algorithm>

#include "template/error.h"
#include "template/value_ops.h"

namespace ubatch::jinja {

void check_nesting(uint32_t depth) {
  if (depth > kMaxValueDepth)
    throw_error(ErrorKind::kLimit, "value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
}

Value Value::undefined(std::string hint, bool unsafe) {
  Value v(Type::kUndefined);
  v.b_ = unsafe;
  if (!hint.empty()) v.ptr_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

Value Value::string(MarkedText text, bool safe) {
  Value v(Type::kString);
  v.ptr_ = std::make_shared<StringData>(StringData{std::move(text), safe});
  return v;
}

Value Value::list(std::vector<Value> items, SeqKind kind) {
  Value v(Type::kList);
  auto data = std::make_shared<ListData>();
  uint32_t depth = 0;
  for (const Value& item : items) {
    const uint32_t d = item.depth();
    if (d > depth) depth = d;
  }
  check_nesting(depth + 1);
  data->items = std::move(items);
  data->kind = kind;
  data->depth = depth + 1;
  v.ptr_ = std::move(data);
  return v;
}

Value Value::failing_iterator(std::string message) {
  Value v = list({}, SeqKind::kIterator);
  std::static_pointer_cast<ListData>(v.ptr_)->pending_error = std::move(message);
  return v;
}

Value Value::dict(std::vector<std::pair<Value, Value>> items) {
  Value v(Type::kDict);
  auto data = std::make_shared<DictData>();
  uint32_t depth = 0;
  for (const auto& [k, val] : items) {
    const uint32_t d = std::max(k.depth(), val.depth());
    if (d > depth) depth = d;
  }
  check_nesting(depth + 1);
  data->items = std::move(items);
  data->depth = depth + 1;
  v.ptr_ = std::move(data);
  return v;
}

Value Value::object(std::shared_ptr<Object> obj) {
  Value v(Type::kObject);
  v.ptr_ = std::move(obj);
  return v;
}

std::string Value::undefined_hint() const {
  if (type_ != Type::kUndefined || !ptr_) return "value is undefined";
  return *static_cast<const std::string*>(ptr_.get());
}

uint32_t Value::depth() const {
  switch (type_) {
    case Type::kList: return list_data().depth;
    case Type::kDict: return dict_data().depth;
    case Type::kObject: return obj().depth();
    default: return 0;
  }
}

bool Value::same_as(const Value& o) const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone: return o.type_ == type_;
    case Type::kBool: return o.type_ == Type::kBool && o.b_ == b_;
    case Type::kInt: return o.type_ == Type::kInt && o.i_ == i_;
    case Type::kFloat: return o.type_ == Type::kFloat && o.f_ == f_;
    default: return o.type_ == type_ && o.ptr_ == ptr_;
  }
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.str() == key) return &v;
  return nullptr;
}

const Value* DictData::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  for (const auto& [k, v] : items)
    if (values_equal(k, key)) return &v;
  return nullptr;
}

std::string Object::repr() const { return concat({"<", type_name(), " object>"}); }

Value Object::call(State&, CallArgs&) { runtime_error(concat({"'", type_name(), "' object is not callable"})); }

Value Object::attribute(State&, std::string_view name) {
  return Value::undefined(concat({"'", type_name(), " object' has no attribute '", name, "'"}));
}

std::string type_name(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined: return "Undefined";
    case Value::Type::kNone: return "NoneType";
    case Value::Type::kBool: return "bool";
    case Value::Type::kInt: return "int";
    case Value::Type::kFloat: return "float";
    case Value::Type::kString: return v.is_safe() ? "Markup" : "str";
    case Value::Type::kList:
      switch (v.seq_kind()) {
        case SeqKind::kList: return "list";
        case SeqKind::kTuple: return "tuple";
        case SeqKind::kIterator: return "generator";
        case SeqKind::kItemsView: return "dict_items";
        case SeqKind::kKeysView: return "dict_keys";
        case SeqKind::kValuesView: return "dict_values";
      }
      return "list";
    case Value::Type::kDict: return "dict";
    case Value::Type::kObject: return std::string(v.obj().type_name());
  }
  return "object";
}

}  // namespace ubatch::jinja
