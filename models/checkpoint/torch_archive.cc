#include "models/checkpoint/torch_archive.h"

#include <zip.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/json_util.h"

namespace attnscope {
namespace {

// The pickle protocol 2 opcodes LibTorch's unpickler runs (torch/csrc/jit/serialization/
// unpickler.cpp, Unpickler::readInstruction); any other is refused here as it is there.
enum Op : uint8_t {
  kProto = 0x80,
  kStop = '.',
  kEmptyList = ']',
  kEmptyTuple = ')',
  kEmptyDict = '}',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kBinGet = 'h',
  kLongBinGet = 'j',
  kMark = '(',
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kNone = 'N',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kBinInt = 'J',
  kLong1 = 0x8a,
  kBinUnicode = 'X',
  kBinFloat = 'G',
  kTuple = 't',
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kAppends = 'e',
  kList = 'l',
  kDict = 'd',
  kSetItems = 'u',
  kSetItem = 's',
  kGlobal = 'c',
  kNewObj = 0x81,
  kBuild = 'b',
  kReduce = 'R',
  kBinPersId = 'Q',
};

// Strings longer than this are not kept (what a state dict needs are "storage", record keys,
// locations and tensor names, all far shorter); tuples longer than kMaxKeptElements keep only their
// depth.
constexpr size_t kMaxKeptString = 1024;
constexpr size_t kMaxKeptElements = 8;
// A global's module and name are each one line of at most this many bytes.
constexpr size_t kMaxGlobalLine = 256;

// What the checker knows of one value of the unpickler's stack or memo.
struct Value {
  enum class Kind { kOther, kInt, kString, kTuple, kList, kDict, kGlobal, kStorage, kTensor };
  enum class Global { kNone, kOrderedDict, kRebuildTensor, kStorageType };
  Kind kind = Kind::kOther;
  // 0 for a scalar; a container is one deeper than its deepest element.
  int depth = 0;
  // An element of a container already: its depth is part of that container's, so it takes no more
  // elements (Python's pickler fills a container before it places it in another).
  bool contained = false;
  // kInt: the value; kStorage: its bytes; kTensor: its storage offset (elements).
  int64_t number = 0;
  Global global = Global::kNone;
  // kGlobal kStorageType and kStorage: bytes per element.
  int64_t item_size = 0;
  // kString, when at most kMaxKeptString bytes; kGlobal kStorageType and kStorage: the type's name
  // (e.g. "FloatStorage") in `type_name`, kStorage: its record key in `text`.
  std::string text;
  bool text_kept = false;
  std::string type_name;
  // kTuple, when at most kMaxKeptElements; kTensor: its storage.
  std::vector<std::shared_ptr<Value>> elements;
  bool elements_kept = false;
  // kTensor: sizes and strides in elements.
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  // kDict: the items whose key is a kept string and whose value is a tensor, in order.
  std::vector<std::pair<std::string, std::shared_ptr<Value>>> tensors;
};
using ValuePtr = std::shared_ptr<Value>;

bool Is(const ValuePtr& value, Value::Kind kind) { return value->kind == kind; }

// torch.<Type>Storage globals of the types a checkpoint holds, with their element sizes
// (c10::ScalarType).
int64_t StorageItemSize(const std::string& name) {
  static const std::map<std::string, int64_t>* const kSizes = new std::map<std::string, int64_t>{
      {"FloatStorage", 4},  {"HalfStorage", 2},         {"BFloat16Storage", 2},
      {"DoubleStorage", 8}, {"LongStorage", 8},         {"IntStorage", 4},
      {"ShortStorage", 2},  {"CharStorage", 1},         {"ByteStorage", 1},
      {"BoolStorage", 1},   {"ComplexFloatStorage", 8}, {"ComplexDoubleStorage", 16}};
  const auto it = kSizes->find(name);
  return it == kSizes->end() ? 0 : it->second;
}

class PickleChecker {
 public:
  PickleChecker(absl::string_view pickle,
                const std::function<std::optional<uint64_t>(const std::string&)>& record_size,
                const TorchPickleLimits& limits)
      : pickle_(pickle), record_size_(record_size), limits_(limits) {}

  absl::Status Run() {
    if (pickle_.size() > limits_.max_pickle_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a pickle of ", pickle_.size(), " bytes: expected at most ", limits_.max_pickle_bytes));
    }
    if (pickle_.size() < 2 || static_cast<uint8_t>(pickle_[0]) != kProto ||
        static_cast<uint8_t>(pickle_[1]) != 2) {
      return Error(
          0, absl::StrCat("expected PROTO 2 (torch.save's pickle protocol), got ",
                          pickle_.size() < 2 ? "the end"
                          : static_cast<uint8_t>(pickle_[0]) != kProto
                              ? Byte(0)
                              : absl::StrCat("protocol ",
                                             static_cast<int>(static_cast<uint8_t>(pickle_[1])))));
    }
    pos_ = 2;
    while (true) {
      if (pos_ >= pickle_.size()) return Error(pos_, "expected STOP, got the end");
      op_at_ = pos_;
      const uint8_t op = Read<uint8_t>();
      if (op == kStop) break;
      if (absl::Status status = Step(op); !status.ok()) return status;
    }
    if (stack_.size() != 1) {
      return Error(op_at_, absl::StrCat("STOP with ", stack_.size(),
                                        " values on the stack: expected one (the state dict)"));
    }
    return absl::OkStatus();
  }

  // After Run(): the tensors of the state dict the pickle builds, in its order.
  absl::StatusOr<std::vector<TorchTensorRecord>> StateDict() const {
    const Value& top = *stack_.front();
    if (top.kind != Value::Kind::kDict) {
      return Error(op_at_, "STOP: expected a state dict (name -> tensor), got another value");
    }
    std::vector<TorchTensorRecord> records;
    records.reserve(top.tensors.size());
    for (const auto& [name, tensor] : top.tensors) {
      const Value& storage = *tensor->elements.front();
      TorchTensorRecord record;
      record.name = name;
      record.storage_key = storage.text;
      record.storage_type = storage.type_name;
      record.item_size = storage.item_size;
      record.storage_numel = storage.number / storage.item_size;
      record.storage_offset = tensor->number;
      record.sizes = tensor->sizes;
      record.strides = tensor->strides;
      records.push_back(std::move(record));
    }
    return records;
  }

 private:
  absl::Status Error(size_t at, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("pickle byte ", at, ": ", what));
  }
  std::string Byte(size_t at) const {
    return absl::StrCat("byte 0x", absl::Hex(static_cast<uint8_t>(pickle_[at]), absl::kZeroPad2));
  }

  bool Has(uint64_t bytes) const { return bytes <= pickle_.size() - pos_; }
  // Little-endian, as pickle's binary integers are; the caller has checked Has(sizeof(T)).
  template <typename T>
  T Read() {
    T value = 0;
    for (size_t i = 0; i < sizeof(T); ++i) {
      value |=
          static_cast<T>(static_cast<uint64_t>(static_cast<uint8_t>(pickle_[pos_ + i])) << (8 * i));
    }
    pos_ += sizeof(T);
    return value;
  }
  template <typename T>
  absl::StatusOr<T> Argument(absl::string_view op_name) {
    if (!Has(sizeof(T))) {
      return Error(
          op_at_, absl::StrCat(op_name, ": expected a ", sizeof(T), "-byte argument, got the end"));
    }
    return Read<T>();
  }

  absl::Status Push(ValuePtr value) {
    if (static_cast<int64_t>(stack_.size()) >= limits_.max_stack) {
      return Error(op_at_, absl::StrCat("more than ", limits_.max_stack, " values on the stack"));
    }
    stack_.push_back(std::move(value));
    return absl::OkStatus();
  }
  absl::Status Need(size_t values, absl::string_view op_name) const {
    if (stack_.size() < values) {
      return Error(op_at_, absl::StrCat(op_name, ": expected ", values,
                                        " values on the stack, got ", stack_.size()));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<size_t> PopMark(absl::string_view op_name) {
    if (marks_.empty()) return Error(op_at_, absl::StrCat(op_name, ": expected a MARK, got none"));
    const size_t mark = marks_.back();
    marks_.pop_back();
    if (mark > stack_.size()) {
      return Error(op_at_, absl::StrCat(op_name, ": its MARK is above the stack"));
    }
    return mark;
  }

  // Adds `item` to `container` (new or being filled) and checks the limits.
  absl::Status AddElement(Value& container, const ValuePtr& item, absl::string_view op_name) {
    if (container.contained) {
      return Error(op_at_, absl::StrCat(op_name,
                                        ": adds to a container that is inside another "
                                        "already (Python's pickler never does)"));
    }
    if (++elements_ > limits_.max_elements) {
      return Error(op_at_,
                   absl::StrCat("more than ", limits_.max_elements, " elements in containers"));
    }
    item->contained = true;
    container.depth = std::max(container.depth, item->depth + 1);
    if (container.depth > limits_.max_nesting) {
      return Error(op_at_, absl::StrCat(op_name, ": containers nested more than ",
                                        limits_.max_nesting, " deep"));
    }
    return absl::OkStatus();
  }

  // A new container of `kind` holding stack_[first, end), which are popped.
  absl::StatusOr<ValuePtr> Collect(Value::Kind kind, size_t first, absl::string_view op_name) {
    auto container = std::make_shared<Value>();
    container->kind = kind;
    container->depth = 1;
    const size_t count = stack_.size() - first;
    container->elements_kept = kind == Value::Kind::kTuple && count <= kMaxKeptElements;
    for (size_t i = first; i < stack_.size(); ++i) {
      if (absl::Status status = AddElement(*container, stack_[i], op_name); !status.ok()) {
        return status;
      }
      if (container->elements_kept) container->elements.push_back(stack_[i]);
    }
    if (kind == Value::Kind::kDict) AddItems(*container, first);
    stack_.resize(first);
    return container;
  }

  // Keeps the (name, tensor) pairs among the keys and values stack_[first, end) put into `dict`.
  void AddItems(Value& dict, size_t first) {
    for (size_t i = first; i + 1 < stack_.size(); i += 2) {
      const ValuePtr& key = stack_[i];
      const ValuePtr& value = stack_[i + 1];
      if (Is(key, Value::Kind::kString) && key->text_kept && Is(value, Value::Kind::kTensor)) {
        dict.tensors.emplace_back(key->text, value);
      }
    }
  }

  absl::Status PushNew(Value::Kind kind) {
    auto value = std::make_shared<Value>();
    value->kind = kind;
    if (kind == Value::Kind::kTuple || kind == Value::Kind::kList || kind == Value::Kind::kDict) {
      value->depth = 1;
      value->elements_kept = kind == Value::Kind::kTuple;
    }
    return Push(std::move(value));
  }
  absl::Status PushInt(int64_t number) {
    auto value = std::make_shared<Value>();
    value->kind = Value::Kind::kInt;
    value->number = number;
    return Push(std::move(value));
  }

  absl::Status Put(uint64_t id) {
    if (stack_.empty()) return Error(op_at_, "BINPUT: expected a value on the stack, got none");
    if (id < memo_.size()) {
      memo_[id] = stack_.back();
      return absl::OkStatus();
    }
    if (id != memo_.size()) {
      return Error(op_at_,
                   absl::StrCat("BINPUT of memo id ", id, ": expected at most ", memo_.size(),
                                " (ids in order, as Python's pickler gives)"));
    }
    if (static_cast<int64_t>(memo_.size()) >= limits_.max_memo) {
      return Error(op_at_, absl::StrCat("more than ", limits_.max_memo, " memo entries"));
    }
    memo_.push_back(stack_.back());
    return absl::OkStatus();
  }
  absl::Status Get(uint64_t id) {
    if (id >= memo_.size()) {
      return Error(op_at_, absl::StrCat("BINGET of memo id ", id, ": expected one of the ",
                                        memo_.size(), " put before"));
    }
    return Push(memo_[id]);
  }

  absl::StatusOr<std::string> GlobalLine() {
    const size_t end = pickle_.find('\n', pos_);
    if (end == absl::string_view::npos || end - pos_ > kMaxGlobalLine) {
      return Error(op_at_,
                   absl::StrCat("GLOBAL: expected a line of at most ", kMaxGlobalLine, " bytes"));
    }
    std::string line(pickle_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return line;
  }

  absl::Status Global() {
    absl::StatusOr<std::string> module = GlobalLine();
    if (!module.ok()) return module.status();
    absl::StatusOr<std::string> name = GlobalLine();
    if (!name.ok()) return name.status();
    auto value = std::make_shared<Value>();
    value->kind = Value::Kind::kGlobal;
    if (*module == "collections" && *name == "OrderedDict") {
      value->global = Value::Global::kOrderedDict;
    } else if (*module == "torch._utils" && *name == "_rebuild_tensor_v2") {
      value->global = Value::Global::kRebuildTensor;
    } else if (*module == "torch" && (value->item_size = StorageItemSize(*name)) > 0) {
      value->global = Value::Global::kStorageType;
      value->type_name = *name;
    } else {
      return Error(op_at_, absl::StrCat("GLOBAL '", Excerpt(*module, 80), ".", Excerpt(*name, 80),
                                        "': expected collections.OrderedDict, "
                                        "torch._utils._rebuild_tensor_v2 or torch.<Type>Storage "
                                        "(a state dict of tensors)"));
    }
    return Push(std::move(value));
  }

  // BINPERSID's ("storage", type, key, location, numel): LibTorch makes a storage of numel
  // elements over the record data/<key> as it is, so the record must hold them.
  absl::Status PersistentId() {
    if (absl::Status status = Need(1, "BINPERSID"); !status.ok()) return status;
    const ValuePtr id = stack_.back();
    stack_.pop_back();
    if (!Is(id, Value::Kind::kTuple) || !id->elements_kept || id->elements.size() != 5 ||
        !Is(id->elements[0], Value::Kind::kString) || id->elements[0]->text != "storage" ||
        !Is(id->elements[1], Value::Kind::kGlobal) ||
        id->elements[1]->global != Value::Global::kStorageType ||
        !Is(id->elements[2], Value::Kind::kString) || !id->elements[2]->text_kept ||
        !Is(id->elements[3], Value::Kind::kString) || !Is(id->elements[4], Value::Kind::kInt)) {
      return Error(op_at_,
                   "BINPERSID: expected (\"storage\", torch.<Type>Storage, key, location, numel)");
    }
    const std::string& key = id->elements[2]->text;
    const int64_t numel = id->elements[4]->number;
    const int64_t item_size = id->elements[1]->item_size;
    auto storage = std::make_shared<Value>();
    storage->kind = Value::Kind::kStorage;
    if (numel < 0) {
      return Error(op_at_, absl::StrCat("storage '", Excerpt(key, 80),
                                        "': expected numel >= 0, got ", numel));
    }
    if (numel > 0) {
      const std::optional<uint64_t> size = record_size_(key);
      if (!size.has_value()) {
        return Error(op_at_,
                     absl::StrCat("storage '", Excerpt(key, 80), "': expected a record data/",
                                  Excerpt(key, 80), " in the archive, got none"));
      }
      if (static_cast<uint64_t>(numel) > *size / static_cast<uint64_t>(item_size)) {
        return Error(
            op_at_,
            absl::StrCat("storage '", Excerpt(key, 80), "': ", numel, " elements of ", item_size,
                         " bytes: expected at most the record's ", *size, " bytes"));
      }
    }
    storage->number = numel * item_size;
    storage->item_size = item_size;
    storage->type_name = id->elements[1]->type_name;
    storage->text = key;
    return Push(std::move(storage));
  }

  // _rebuild_tensor_v2(storage, storage_offset, size, stride, ...): a view inside the storage.
  absl::StatusOr<ValuePtr> RebuildTensor(const ValuePtr& args) {
    const char* const kExpected =
        "_rebuild_tensor_v2: expected (storage, storage_offset, size, stride, ...) with at most "
        "8 dimensions";
    if (!Is(args, Value::Kind::kTuple) || !args->elements_kept || args->elements.size() < 4 ||
        !Is(args->elements[0], Value::Kind::kStorage) ||
        !Is(args->elements[1], Value::Kind::kInt) || !Is(args->elements[2], Value::Kind::kTuple) ||
        !args->elements[2]->elements_kept || !Is(args->elements[3], Value::Kind::kTuple) ||
        !args->elements[3]->elements_kept ||
        args->elements[2]->elements.size() != args->elements[3]->elements.size()) {
      return Error(op_at_, kExpected);
    }
    const Value& storage = *args->elements[0];
    const int64_t offset = args->elements[1]->number;
    const std::vector<ValuePtr>& sizes = args->elements[2]->elements;
    const std::vector<ValuePtr>& strides = args->elements[3]->elements;
    // The last element's index, in 128 bits so that no product of int64 values overflows.
    __int128 last = offset;
    bool empty = false;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (!Is(sizes[d], Value::Kind::kInt) || !Is(strides[d], Value::Kind::kInt)) {
        return Error(op_at_, kExpected);
      }
      const int64_t size = sizes[d]->number;
      const int64_t stride = strides[d]->number;
      if (size < 0 || stride < 0 || offset < 0) {
        return Error(op_at_, absl::StrCat("_rebuild_tensor_v2: dimension ", d, " of size ", size,
                                          ", stride ", stride, ", offset ", offset,
                                          ": expected none negative"));
      }
      if (size == 0) empty = true;
      last += static_cast<__int128>(size - (size > 0 ? 1 : 0)) * stride;
    }
    const __int128 bytes = (last + 1) * storage.item_size;
    if (!empty && bytes > storage.number) {
      const __int128 kMax = std::numeric_limits<int64_t>::max();
      return Error(op_at_, absl::StrCat("_rebuild_tensor_v2: a tensor reaching byte ",
                                        static_cast<int64_t>(std::min(bytes, kMax)),
                                        ": expected at most its storage's ", storage.number));
    }
    auto tensor = std::make_shared<Value>();
    tensor->kind = Value::Kind::kTensor;
    tensor->elements.push_back(args->elements[0]);
    tensor->number = offset;
    for (size_t d = 0; d < sizes.size(); ++d) {
      tensor->sizes.push_back(sizes[d]->number);
      tensor->strides.push_back(strides[d]->number);
    }
    return tensor;
  }

  absl::Status Reduce() {
    if (absl::Status status = Need(2, "REDUCE"); !status.ok()) return status;
    const ValuePtr args = stack_.back();
    const ValuePtr callable = stack_[stack_.size() - 2];
    stack_.resize(stack_.size() - 2);
    if (callable->kind != Value::Kind::kGlobal || callable->global == Value::Global::kStorageType) {
      return Error(op_at_, "REDUCE: expected OrderedDict or _rebuild_tensor_v2 to call");
    }
    if (callable->global == Value::Global::kOrderedDict) return PushNew(Value::Kind::kDict);
    absl::StatusOr<ValuePtr> tensor = RebuildTensor(args);
    if (!tensor.ok()) return tensor.status();
    return Push(*std::move(tensor));
  }

  absl::Status Step(uint8_t op) {
    switch (op) {
      case kEmptyList:
        return PushNew(Value::Kind::kList);
      case kEmptyTuple:
        return PushNew(Value::Kind::kTuple);
      case kEmptyDict:
        return PushNew(Value::Kind::kDict);
      case kNone:
      case kNewTrue:
      case kNewFalse:
        return PushNew(Value::Kind::kOther);
      case kBinPut: {
        absl::StatusOr<uint8_t> id = Argument<uint8_t>("BINPUT");
        return id.ok() ? Put(*id) : id.status();
      }
      case kLongBinPut: {
        absl::StatusOr<uint32_t> id = Argument<uint32_t>("LONG_BINPUT");
        return id.ok() ? Put(*id) : id.status();
      }
      case kBinGet: {
        absl::StatusOr<uint8_t> id = Argument<uint8_t>("BINGET");
        return id.ok() ? Get(*id) : id.status();
      }
      case kLongBinGet: {
        absl::StatusOr<uint32_t> id = Argument<uint32_t>("LONG_BINGET");
        return id.ok() ? Get(*id) : id.status();
      }
      case kMark:
        if (static_cast<int64_t>(marks_.size()) >= limits_.max_open_marks) {
          return Error(op_at_, absl::StrCat("more than ", limits_.max_open_marks, " open MARKs"));
        }
        marks_.push_back(stack_.size());
        return absl::OkStatus();
      case kBinInt1: {
        absl::StatusOr<uint8_t> value = Argument<uint8_t>("BININT1");
        return value.ok() ? PushInt(*value) : value.status();
      }
      case kBinInt2: {
        absl::StatusOr<uint16_t> value = Argument<uint16_t>("BININT2");
        return value.ok() ? PushInt(*value) : value.status();
      }
      case kBinInt: {
        absl::StatusOr<uint32_t> value = Argument<uint32_t>("BININT");
        return value.ok() ? PushInt(static_cast<int32_t>(*value)) : value.status();
      }
      case kLong1: {
        // Python writes the shortest two's complement little-endian form: 5 bytes for 2**31.
        absl::StatusOr<uint8_t> length = Argument<uint8_t>("LONG1");
        if (!length.ok()) return length.status();
        if (*length > 8) {
          return Error(op_at_,
                       absl::StrCat("LONG1 of ", *length, " bytes: expected at most 8 (int64)"));
        }
        if (!Has(*length)) return Error(op_at_, "LONG1: expected its bytes, got the end");
        uint64_t value = 0;
        for (size_t i = 0; i < *length; ++i) {
          value |= static_cast<uint64_t>(static_cast<uint8_t>(pickle_[pos_ + i])) << (8 * i);
        }
        if (*length > 0 && *length < 8 &&
            (static_cast<uint8_t>(pickle_[pos_ + *length - 1]) & 0x80) != 0) {
          value |= ~uint64_t{0} << (8 * *length);
        }
        pos_ += *length;
        return PushInt(static_cast<int64_t>(value));
      }
      case kBinFloat:
        if (!Has(8)) return Error(op_at_, "BINFLOAT: expected 8 bytes, got the end");
        pos_ += 8;
        return PushNew(Value::Kind::kOther);
      case kBinUnicode: {
        absl::StatusOr<uint32_t> length = Argument<uint32_t>("BINUNICODE");
        if (!length.ok()) return length.status();
        if (!Has(*length)) {
          return Error(op_at_,
                       absl::StrCat("BINUNICODE of ", *length, " bytes: expected at most the ",
                                    pickle_.size() - pos_, " bytes left"));
        }
        auto value = std::make_shared<Value>();
        value->kind = Value::Kind::kString;
        value->text_kept = *length <= kMaxKeptString;
        if (value->text_kept) value->text = std::string(pickle_.substr(pos_, *length));
        pos_ += *length;
        return Push(std::move(value));
      }
      case kTuple:
      case kList:
      case kDict: {
        const char* name = op == kTuple ? "TUPLE" : op == kList ? "LIST" : "DICT";
        absl::StatusOr<size_t> mark = PopMark(name);
        if (!mark.ok()) return mark.status();
        if (op == kDict && (stack_.size() - *mark) % 2 != 0) {
          return Error(op_at_, "DICT: expected keys and values in pairs, got an odd count");
        }
        const Value::Kind kind = op == kTuple  ? Value::Kind::kTuple
                                 : op == kList ? Value::Kind::kList
                                               : Value::Kind::kDict;
        absl::StatusOr<ValuePtr> container = Collect(kind, *mark, name);
        return container.ok() ? Push(*std::move(container)) : container.status();
      }
      case kTuple1:
      case kTuple2:
      case kTuple3: {
        const size_t count = op - kTuple1 + 1;
        if (absl::Status status = Need(count, "TUPLE1/2/3"); !status.ok()) return status;
        absl::StatusOr<ValuePtr> tuple =
            Collect(Value::Kind::kTuple, stack_.size() - count, "TUPLE1/2/3");
        return tuple.ok() ? Push(*std::move(tuple)) : tuple.status();
      }
      case kAppends:
      case kSetItems: {
        const bool dict = op == kSetItems;
        const char* name = dict ? "SETITEMS" : "APPENDS";
        absl::StatusOr<size_t> mark = PopMark(name);
        if (!mark.ok()) return mark.status();
        if (*mark == 0 ||
            stack_[*mark - 1]->kind != (dict ? Value::Kind::kDict : Value::Kind::kList)) {
          return Error(op_at_, absl::StrCat(name, ": expected a ", dict ? "dict" : "list",
                                            " below its MARK"));
        }
        if (dict && (stack_.size() - *mark) % 2 != 0) {
          return Error(op_at_, "SETITEMS: expected keys and values in pairs, got an odd count");
        }
        Value& container = *stack_[*mark - 1];
        for (size_t i = *mark; i < stack_.size(); ++i) {
          if (absl::Status status = AddElement(container, stack_[i], name); !status.ok()) {
            return status;
          }
        }
        if (dict) AddItems(container, *mark);
        stack_.resize(*mark);
        return absl::OkStatus();
      }
      case kSetItem: {
        if (absl::Status status = Need(3, "SETITEM"); !status.ok()) return status;
        Value& dict = *stack_[stack_.size() - 3];
        if (dict.kind != Value::Kind::kDict) {
          return Error(op_at_, "SETITEM: expected a dict below the key and value");
        }
        for (size_t i = stack_.size() - 2; i < stack_.size(); ++i) {
          if (absl::Status status = AddElement(dict, stack_[i], "SETITEM"); !status.ok()) {
            return status;
          }
        }
        AddItems(dict, stack_.size() - 2);
        stack_.resize(stack_.size() - 2);
        return absl::OkStatus();
      }
      case kGlobal:
        return Global();
      case kReduce:
        return Reduce();
      case kBuild: {
        // A state dict's _metadata: the object below takes the state on top as one element.
        if (absl::Status status = Need(2, "BUILD"); !status.ok()) return status;
        const ValuePtr state = stack_.back();
        stack_.pop_back();
        return AddElement(*stack_.back(), state, "BUILD");
      }
      case kNewObj:
        if (absl::Status status = Need(1, "NEWOBJ"); !status.ok()) return status;
        stack_.pop_back();
        return absl::OkStatus();
      case kBinPersId:
        return PersistentId();
      default:
        return Error(op_at_, absl::StrCat("opcode ", Byte(op_at_),
                                          ": expected one of pickle protocol 2's that torch.save "
                                          "writes"));
    }
  }

  const absl::string_view pickle_;
  const std::function<std::optional<uint64_t>(const std::string&)>& record_size_;
  const TorchPickleLimits& limits_;
  size_t pos_ = 0;
  size_t op_at_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::vector<ValuePtr> memo_;
  int64_t elements_ = 0;
};

std::string ZipErrorText(zip_error_t* error) {
  std::string text = zip_error_strerror(error);
  zip_error_fini(error);
  return text;
}

// Reads `size` bytes from the start of entry `index` into `out`; the error names what failed.
absl::Status ReadEntry(zip_t* archive, zip_uint64_t index, char* out, uint64_t size) {
  zip_file_t* file = zip_fopen_index(archive, index, /*flags=*/0);
  if (file == nullptr) return absl::InvalidArgumentError(zip_strerror(archive));
  uint64_t done = 0;
  std::string error;
  while (done < size) {
    const zip_int64_t read = zip_fread(file, out + done, size - done);
    if (read <= 0) {
      error = read < 0 ? zip_file_strerror(file) : "shorter than its zip entry says";
      break;
    }
    done += static_cast<uint64_t>(read);
  }
  zip_fclose(file);
  if (done != size) return absl::InvalidArgumentError(error);
  return absl::OkStatus();
}

}  // namespace

void TorchArchive::ZipCloser::operator()(zip* archive) const { zip_discard(archive); }

absl::Status CheckTorchPickle(
    absl::string_view pickle,
    const std::function<std::optional<uint64_t>(const std::string& key)>& record_size,
    const TorchPickleLimits& limits) {
  return PickleChecker(pickle, record_size, limits).Run();
}

absl::StatusOr<std::vector<TorchTensorRecord>> ReadTorchPickle(
    absl::string_view pickle,
    const std::function<std::optional<uint64_t>(const std::string& key)>& record_size,
    const TorchPickleLimits& limits) {
  PickleChecker checker(pickle, record_size, limits);
  if (absl::Status status = checker.Run(); !status.ok()) return status;
  return checker.StateDict();
}

absl::StatusOr<std::unique_ptr<TorchArchive>> TorchArchive::Open(const std::string& path,
                                                                 absl::string_view bytes,
                                                                 const TorchPickleLimits& limits) {
  const auto refuse = [&path](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", path, "': ", what,
                     "; convert it to model.safetensors if it is a real checkpoint"));
  };
  auto result = std::unique_ptr<TorchArchive>(new TorchArchive());
  result->path_ = path;
  zip_error_t error;
  zip_error_init(&error);
  zip_source_t* source = zip_source_buffer_create(bytes.data(), bytes.size(), /*freep=*/0, &error);
  if (source == nullptr) return refuse(absl::StrCat("cannot be read: ", ZipErrorText(&error)));
  result->archive_.reset(zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &error));
  if (result->archive_ == nullptr) {
    zip_source_free(source);
    return refuse(absl::StrCat("expected torch.save's zip format (PyTorch 1.6 and later), got ",
                               ZipErrorText(&error)));
  }
  zip_error_fini(&error);
  zip_t* archive = result->archive_.get();

  const zip_int64_t count = zip_get_num_entries(archive, /*flags=*/0);
  std::string prefix;
  std::map<std::string, uint64_t> record_sizes;
  std::optional<zip_uint64_t> pickle_index;
  std::optional<zip_uint64_t> byteorder_index;
  uint64_t pickle_size = 0;
  uint64_t byteorder_size = 0;
  uint64_t inflated = 0;
  for (zip_int64_t i = 0; i < count; ++i) {
    zip_stat_t stat;
    zip_stat_init(&stat);
    if (zip_stat_index(archive, static_cast<zip_uint64_t>(i), /*flags=*/0, &stat) != 0 ||
        (stat.valid & (ZIP_STAT_NAME | ZIP_STAT_SIZE)) != (ZIP_STAT_NAME | ZIP_STAT_SIZE)) {
      return refuse(absl::StrCat("zip entry ", i, ": cannot be read: ", zip_strerror(archive)));
    }
    const std::string name = stat.name;
    if ((stat.valid & ZIP_STAT_ENCRYPTION_METHOD) != 0 && stat.encryption_method != ZIP_EM_NONE) {
      return refuse(absl::StrCat("zip entry '", Excerpt(name, 120),
                                 "': expected no encryption, got an encrypted entry"));
    }
    inflated += stat.size;
    if (inflated > 2 * static_cast<uint64_t>(bytes.size()) + (1 << 20)) {
      return refuse(absl::StrCat("zip entries inflating to more than ", inflated,
                                 " bytes: expected at most twice the ", bytes.size(),
                                 " bytes of the file (torch.save stores them uncompressed)"));
    }
    // PyTorch's reader takes the archive's name from its first entry's folder.
    if (i == 0) prefix = name.substr(0, name.find('/') + 1);
    if (prefix.empty() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string inner = name.substr(prefix.size());
    if (inner == "data.pkl") {
      pickle_index = static_cast<zip_uint64_t>(i);
      pickle_size = stat.size;
    } else if (inner == "byteorder") {
      byteorder_index = static_cast<zip_uint64_t>(i);
      byteorder_size = stat.size;
    } else if (inner.compare(0, 5, "data/") == 0) {
      record_sizes[inner.substr(5)] = stat.size;
      result->record_index_[inner.substr(5)] = static_cast<zip_uint64_t>(i);
    }
  }
  if (!pickle_index.has_value()) {
    return refuse("expected a zip archive with <archive>/data.pkl (torch.save's format), got none");
  }
  // PyTorch 1.12 and later write the byte order of the records; older files are little-endian.
  if (byteorder_index.has_value()) {
    std::string order(static_cast<size_t>(std::min<uint64_t>(byteorder_size, 16)), '\0');
    const absl::Status read = ReadEntry(archive, *byteorder_index, order.data(), order.size());
    if (!read.ok()) return refuse(absl::StrCat("byteorder cannot be read: ", read.message()));
    if (order != "little") {
      return refuse(
          absl::StrCat("byteorder: expected \"little\", got \"", Excerpt(order, 16), "\""));
    }
  }
  if (pickle_size > limits.max_pickle_bytes) {
    return refuse(absl::StrCat("data.pkl of ", pickle_size, " bytes: expected at most ",
                               limits.max_pickle_bytes, " (a state dict's pickle is small)"));
  }
  std::string pickle(static_cast<size_t>(pickle_size), '\0');
  if (const absl::Status read = ReadEntry(archive, *pickle_index, pickle.data(), pickle_size);
      !read.ok()) {
    return refuse(absl::StrCat("data.pkl cannot be read: ", read.message()));
  }
  absl::StatusOr<std::vector<TorchTensorRecord>> tensors = ReadTorchPickle(
      pickle,
      [&record_sizes](const std::string& key) -> std::optional<uint64_t> {
        const auto it = record_sizes.find(key);
        if (it == record_sizes.end()) return std::nullopt;
        return it->second;
      },
      limits);
  if (!tensors.ok()) return refuse(absl::StrCat("data.pkl: ", tensors.status().message()));
  result->tensors_ = *std::move(tensors);
  return result;
}

absl::Status TorchArchive::ReadRecord(const std::string& key, char* out, uint64_t size) const {
  if (size == 0) return absl::OkStatus();
  const auto it = record_index_.find(key);
  if (it == record_index_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path_, "': record data/",
                                                   Excerpt(key, 80), ": expected it, got none"));
  }
  if (const absl::Status read = ReadEntry(archive_.get(), it->second, out, size); !read.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path_, "': record data/",
                                                   Excerpt(key, 80),
                                                   " cannot be read: ", read.message()));
  }
  return absl::OkStatus();
}

absl::Status CheckTorchArchive(const std::string& path, absl::string_view bytes,
                               const TorchPickleLimits& limits) {
  return TorchArchive::Open(path, bytes, limits).status();
}

}  // namespace attnscope
