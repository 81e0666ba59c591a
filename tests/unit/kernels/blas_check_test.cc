// LoadedBlasLibrary (models/kernels/blas_check.h) on this machine, where scripts/install-deps.sh
// installs libopenblas0-pthread: LibTorch's libblas.so.3 is OpenBLAS's, and the start-up warning
// names the library it found rather than guessing from a timing.
#include "models/kernels/blas_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

namespace attnscope {
namespace {

using ::testing::HasSubstr;

TEST(LoadedBlasLibraryTest, IsOpenBlasThroughDebiansAlternative) {
  // A matmul makes sure LibTorch has called into the library.
  EXPECT_GT(MeasureMatmulGflops(/*n=*/64, /*repeats=*/1), 0.0);
  const std::string library = LoadedBlasLibrary();
  EXPECT_THAT(library, HasSubstr("openblas")) << "libblas.so.3 is " << library;
  EXPECT_THAT(library, HasSubstr("libblas.so"));
  EXPECT_TRUE(std::filesystem::path(library).is_absolute()) << library;
  EXPECT_FALSE(std::filesystem::is_symlink(library)) << library << " is not resolved";
}

TEST(OpenBlasCoreTypeForTest, FallBackCoresGetTheKernelsOfTheCpusVectorWidth) {
  EXPECT_EQ(OpenBlasCoreTypeFor("Prescott", /*has_avx2_fma=*/true, /*has_avx512_skylake=*/true),
            "SkylakeX");
  EXPECT_EQ(OpenBlasCoreTypeFor("Prescott", /*has_avx2_fma=*/true, /*has_avx512_skylake=*/false),
            "Haswell");
  EXPECT_EQ(OpenBlasCoreTypeFor("Sandybridge", /*has_avx2_fma=*/true,
                                /*has_avx512_skylake=*/false),
            "Haswell");
  EXPECT_EQ(OpenBlasCoreTypeFor("Barcelona", /*has_avx2_fma=*/true, /*has_avx512_skylake=*/true),
            "SkylakeX");
  // A CPU that has no more than the fall-back's kernels use keeps them.
  EXPECT_EQ(OpenBlasCoreTypeFor("Prescott", /*has_avx2_fma=*/false, /*has_avx512_skylake=*/false),
            "");
}

TEST(OpenBlasCoreTypeForTest, RecognisedCoresStayAsOpenBlasChose) {
  for (const char* core : {"Haswell", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen"}) {
    EXPECT_EQ(OpenBlasCoreTypeFor(core, /*has_avx2_fma=*/true, /*has_avx512_skylake=*/true), "")
        << core;
  }
}

TEST(OpenBlasCoreNameTest, NamesTheLoadedOpenBlasCore) { EXPECT_FALSE(OpenBlasCoreName().empty()); }

}  // namespace
}  // namespace attnscope
