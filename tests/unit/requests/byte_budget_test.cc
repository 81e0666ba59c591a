// ByteBudget (models/requests/byte_budget.h): the server-wide limit, a client's share, and the
// share's shrinking in the budget's last quarter.
#include "models/requests/byte_budget.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnscope {
namespace {

using ::testing::HasSubstr;

TEST(ByteBudgetTest, AClientsOtherAnswersAreHeldToItsShare) {
  std::vector<bool> refusals;
  ByteBudget budget(/*limit=*/1000, "--budget", /*client_limit=*/500, "--share",
                    [&refusals](bool over_client_share) { refusals.push_back(over_client_share); });
  absl::StatusOr<ByteBudget::Hold> first = budget.Reserve(400, "first", "a", /*fixes=*/"send less");
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<ByteBudget::Hold> second =
      budget.Reserve(200, "second", "a", /*fixes=*/"send less");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(second.status().message(),
              HasSubstr("over its share of 500 bytes (--share, so that"));
  // The caller's fixes end the message: what makes the answer smaller depends on the method.
  EXPECT_THAT(second.status().message(),
              HasSubstr("read the answers under way first, or send less"));
  // A client's first answer is granted at any size the limit allows.
  absl::StatusOr<ByteBudget::Hold> other = budget.Reserve(500, "other", "b", /*fixes=*/"send less");
  EXPECT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(refusals, std::vector<bool>{true});
}

TEST(ByteBudgetTest, TwoBusyClientsLeaveRoomForAThird) {
  ByteBudget budget(/*limit=*/1000, "--budget", /*client_limit=*/500, "--share");
  absl::StatusOr<ByteBudget::Hold> a = budget.Reserve(300, "a's first", "a", /*fixes=*/"send less");
  absl::StatusOr<ByteBudget::Hold> b = budget.Reserve(300, "b's first", "b", /*fixes=*/"send less");
  ASSERT_TRUE(a.ok() && b.ok());
  // Up to three quarters of the budget, the flag's share (500) holds.
  absl::StatusOr<ByteBudget::Hold> a_within =
      budget.Reserve(150, "a's second", "a", /*fixes=*/"send less");
  ASSERT_TRUE(a_within.ok()) << a_within.status();
  a_within->reset();
  // Past it, each of the two clients may hold a third (333): 300 + 200 is refused, though it is
  // within the flag's 500, which would leave 0 bytes for anyone else.
  absl::StatusOr<ByteBudget::Hold> a_over =
      budget.Reserve(200, "a's second", "a", /*fixes=*/"send less");
  EXPECT_EQ(a_over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(a_over.status().message(), HasSubstr("over its share of 333 bytes"));
  EXPECT_THAT(a_over.status().message(), HasSubstr("2 clients hold some"));
  absl::StatusOr<ByteBudget::Hold> b_small =
      budget.Reserve(30, "b's second", "b", /*fixes=*/"send less");
  EXPECT_TRUE(b_small.ok()) << b_small.status();
  // The third client's answer finds its room.
  absl::StatusOr<ByteBudget::Hold> c = budget.Reserve(300, "c's first", "c", /*fixes=*/"send less");
  EXPECT_TRUE(c.ok()) << c.status();
}

// A client that took its half before the last quarter, and a second client, cannot take the room
// a third needs: in the last quarter a holding client may not take the total into the last equal
// part (before, three clients filled the budget and a fourth was refused).
TEST(ByteBudgetTest, AnEqualPartStaysFreeForAClientHoldingNothing) {
  ByteBudget budget(/*limit=*/1000, "--budget", /*client_limit=*/500, "--share");
  std::vector<ByteBudget::Hold> held;
  for (const char* client : {"a", "b"}) {
    absl::StatusOr<ByteBudget::Hold> hold =
        budget.Reserve(client[0] == 'a' ? 500 : 100, "first", client, /*fixes=*/"");
    ASSERT_TRUE(hold.ok()) << hold.status();
    held.push_back(*std::move(hold));
  }
  absl::StatusOr<ByteBudget::Hold> b_second = budget.Reserve(150, "second", "b", /*fixes=*/"");
  ASSERT_TRUE(b_second.ok()) << b_second.status();  // 750: not past three quarters
  // b would hold 300, within its part (333), but the total (800) would leave less than a part.
  absl::StatusOr<ByteBudget::Hold> b_third = budget.Reserve(50, "third", "b", /*fixes=*/"");
  EXPECT_EQ(b_third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(b_third.status().message(), HasSubstr("with room left for one more"));
  absl::StatusOr<ByteBudget::Hold> c = budget.Reserve(200, "first", "c", /*fixes=*/"");
  EXPECT_TRUE(c.ok()) << c.status();
}

TEST(ByteBudgetTest, AShareOfTheWholeBudgetIsNoShare) {
  ByteBudget budget(/*limit=*/1000, "--budget", /*client_limit=*/1000, "--share");
  absl::StatusOr<ByteBudget::Hold> a = budget.Reserve(600, "a's first", "a", /*fixes=*/"send less");
  absl::StatusOr<ByteBudget::Hold> a_second =
      budget.Reserve(350, "a's second", "a", /*fixes=*/"send less");
  EXPECT_TRUE(a.ok() && a_second.ok());
  absl::StatusOr<ByteBudget::Hold> over =
      budget.Reserve(100, "a's third", "a", /*fixes=*/"send less");
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(), HasSubstr("over this server's limit of 1000 bytes"));
}

}  // namespace
}  // namespace attnscope
