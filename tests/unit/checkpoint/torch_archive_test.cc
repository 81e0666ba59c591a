// The checks of torch.save files before LibTorch reads them, on the hostile archives of
// tests/data/make_hostile_pickles.py (written by Python's zipfile and torch.save, not by
// attnscope): each refused on one line naming what is wrong, and the well-formed ones accepted and
// loaded with their values.
#include "models/checkpoint/torch_archive.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/checkpoint/checkpoint.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using ::testing::HasSubstr;

class TorchArchiveTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    folder_ = new std::string(testing::MakeTempDir());
    const std::string command =
        absl::StrCat("/usr/bin/python3 ", ATTNSCOPE_MAKE_HOSTILE_PICKLES, " ", *folder_);
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*folder_);
    delete folder_;
  }

  static absl::Status Check(const std::string& name) {
    const std::string path = *folder_ + "/" + name + ".bin";
    return CheckTorchArchive(path, testing::ReadFileBytes(path));
  }

  // A checkpoint folder whose pytorch_model.bin is the archive `name`.
  static std::string ModelDir(const std::string& name) {
    const std::string dir = testing::MakeTempDir();
    std::filesystem::copy_file(*folder_ + "/" + name + ".bin", dir + "/pytorch_model.bin");
    return dir;
  }

  static std::string* folder_;
};

std::string* TorchArchiveTest::folder_ = nullptr;

TEST_F(TorchArchiveTest, EachHostileArchiveIsRefusedOnOneLineNamingWhatIsWrong) {
  const std::pair<const char*, const char*> kCases[] = {
      {"nested_tuples", "containers nested more than 32 deep"},
      {"open_marks", "more than 64 open MARKs"},
      {"string_4gb", "BINUNICODE of 4294967295 bytes: expected at most the 4 bytes left"},
      {"memo_id_4e9", "BINPUT of memo id 4000000000: expected at most 0"},
      {"deflated_1500mb", "inflating to more than"},
      {"storage_beyond_record",
       "storage '0': 1000000 elements of 4 bytes: expected at most the record's 24 bytes"},
      {"tensor_beyond_storage",
       "a tensor reaching byte 4000000: expected at most its storage's 24"},
      {"global_os_system", "GLOBAL 'os.system': expected collections.OrderedDict"},
      {"odd_setitems", "SETITEMS: expected keys and values in pairs"},
      {"list_nested_by_memo", "adds to a container that is inside another already"},
  };
  for (const auto& [name, expected] : kCases) {
    const absl::Status status = Check(name);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name << ": " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(expected)) << name;
    EXPECT_THAT(std::string(status.message()), HasSubstr(name)) << "the file's path";
    EXPECT_EQ(status.message().find('\n'), absl::string_view::npos) << name;
    EXPECT_LT(status.message().size(), 1000u) << name;
  }
}

TEST_F(TorchArchiveTest, AHandWrittenStateDictIsAcceptedAndLoadsItsValues) {
  ASSERT_TRUE(Check("valid").ok()) << Check("valid");
  auto checkpoint = Checkpoint::Open(ModelDir("valid"));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_TRUE(
      torch::equal((*checkpoint)->Get("w"), torch::arange(1, 7, torch::kFloat32).view({2, 3})));
  EXPECT_TRUE(torch::equal((*checkpoint)->Get("b"), torch::tensor({0.5f, 1.0f, 2.0f})));
}

// What torch.save writes for a model's state_dict(): an OrderedDict with _metadata set by BUILD,
// views at an offset of a shared storage, bfloat16. LibTorch 1.13's own unpickler turned the
// OrderedDict into None ("Expected GenericDict but got None").
TEST_F(TorchArchiveTest, WhatTorchSaveWritesIsAcceptedAndLoadsItsValues) {
  ASSERT_TRUE(Check("torch_saved").ok()) << Check("torch_saved");
  const std::string real = testing::TestDataDir() + "/tiny-bert-pickle/pytorch_model.bin";
  EXPECT_TRUE(CheckTorchArchive(real, testing::ReadFileBytes(real)).ok());

  auto checkpoint = Checkpoint::Open(ModelDir("torch_saved"));
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->Names().size(), 3u);
  const torch::Tensor expected = torch::arange(2, 8, torch::kFloat32).view({2, 3});
  EXPECT_TRUE(torch::equal((*checkpoint)->Get("w"), expected)) << (*checkpoint)->Get("w");
  EXPECT_TRUE(torch::equal((*checkpoint)->Get("tied"), expected));
  EXPECT_TRUE(torch::equal((*checkpoint)->Get("b"), torch::tensor({0.5f, 1.0f, 2.0f})))
      << (*checkpoint)->Get("b");
}

TEST(TorchPickleTest, LimitsAreTheCallersAndTruncationIsNamed) {
  const auto no_records = [](const std::string&) -> std::optional<uint64_t> {
    return std::nullopt;
  };
  // PROTO 2, EMPTY_TUPLE, TUPLE1 x 3, STOP: nested 4 deep.
  const std::string nested("\x80\x02)\x85\x85\x85.", 7);
  EXPECT_TRUE(CheckTorchPickle(nested, no_records).ok());
  TorchPickleLimits limits;
  limits.max_nesting = 3;
  EXPECT_THAT(std::string(CheckTorchPickle(nested, no_records, limits).message()),
              HasSubstr("pickle byte 5: TUPLE1/2/3: containers nested more than 3 deep"));
  EXPECT_THAT(std::string(CheckTorchPickle(nested.substr(0, 6), no_records).message()),
              HasSubstr("pickle byte 6: expected STOP, got the end"));
  EXPECT_THAT(std::string(CheckTorchPickle(std::string("\x80\x04N.", 4), no_records).message()),
              HasSubstr("expected PROTO 2"));
  EXPECT_THAT(std::string(CheckTorchPickle(std::string("\x80\x02NN.", 5), no_records).message()),
              HasSubstr("STOP with 2 values on the stack"));
}

// The bytes of a string literal, NULs included.
template <size_t N>
std::string Bytes(const char (&text)[N]) {
  return std::string(text, N - 1);
}

// {"w": _rebuild_tensor_v2(storage "0" of 6 floats, offset, (size,), (1,), False, None)} with the
// offset and size pickled as given, e.g. LONG1 in Python's shortest form (pickle.dumps(2**31, 2)
// gives 5 bytes).
std::string StateDictPickle(const std::string& offset, const std::string& size) {
  // Adjacent literals end a hex escape before a character that is a hex digit ("0", "cpu").
  return absl::StrCat(Bytes("\x80\x02}X\x01\x00\x00\x00"
                            "w"),
                      "ctorch._utils\n_rebuild_tensor_v2\n(", Bytes("(X\x07\x00\x00\x00storage"),
                      "ctorch\nFloatStorage\n",
                      Bytes("X\x01\x00\x00\x00"
                            "0X\x03\x00\x00\x00"
                            "cpuK\x06tQ"),
                      offset, size, Bytes("\x85K\x01\x85\x89NtRs."));
}

TEST(TorchPickleTest, Long1IntegersInPythonsShortestFormAreRead) {
  const auto six_floats = [](const std::string&) -> std::optional<uint64_t> { return 24; };
  absl::StatusOr<std::vector<TorchTensorRecord>> read = ReadTorchPickle(
      StateDictPickle(std::string("\x8a\x01\x02", 3), std::string("\x8a\x01\x04", 3)), six_floats);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 1u);
  EXPECT_EQ((*read)[0].name, "w");
  EXPECT_EQ((*read)[0].storage_key, "0");
  EXPECT_EQ((*read)[0].storage_type, "FloatStorage");
  EXPECT_EQ((*read)[0].storage_numel, 6);
  EXPECT_EQ((*read)[0].storage_offset, 2);
  EXPECT_EQ((*read)[0].sizes, std::vector<int64_t>{4});
  EXPECT_EQ((*read)[0].strides, std::vector<int64_t>{1});
  // 0xff is -1 in one byte; 2**31 takes five (its sign byte 0x00).
  EXPECT_THAT(std::string(ReadTorchPickle(StateDictPickle(std::string("\x8a\x01\xff", 3),
                                                          std::string("K\x01", 2)),
                                          six_floats)
                              .status()
                              .message()),
              HasSubstr("offset -1: expected none negative"));
  EXPECT_THAT(
      std::string(ReadTorchPickle(StateDictPickle(std::string("K\x00", 2),
                                                  std::string("\x8a\x05\x00\x00\x00\x80\x00", 7)),
                                  six_floats)
                      .status()
                      .message()),
      HasSubstr("a tensor reaching byte 8589934592: expected at most its storage's 24"));
  EXPECT_THAT(std::string(CheckTorchPickle(std::string("\x80\x05N.", 4), six_floats).message()),
              HasSubstr("expected PROTO 2 (torch.save's pickle protocol), got protocol 5"));
}

}  // namespace
}  // namespace attnscope
