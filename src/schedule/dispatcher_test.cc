#include "schedule/dispatcher.h"

#include <gtest/gtest.h>

namespace weft {
namespace {

// A schedule of `n` ops of `bytes` each in one iteration, priority = index.
Schedule uniform_ops(int n, Bytes bytes, DispatchPolicy policy, int period = 1) {
  Schedule s;
  s.strategy = "test";
  s.period = period;
  s.iterations.resize(static_cast<size_t>(period));
  for (int i = 0; i < n; ++i) {
    CommOp op;
    op.chunks = {{i, 0, bytes}};
    op.ready_after = i;
    op.priority = i;
    s.iterations[0].push_back(op);
  }
  s.dispatch = std::move(policy);
  return s;
}

std::vector<int> indices(const Message& m) {
  std::vector<int> out;
  for (const OpRef& op : m.ops) out.push_back(op.index);
  return out;
}

TEST(Dispatcher, InOrderSendsOneAtATimeInListOrder) {
  const Schedule s = uniform_ops(3, 10, {});
  Dispatcher d(s);
  d.ready({0, 1});
  EXPECT_TRUE(d.launch().empty()) << "op 1 must wait for op 0";
  d.ready({0, 0});
  auto first = d.launch();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(indices(first[0]), std::vector<int>{0});
  EXPECT_TRUE(d.launch().empty()) << "one message at a time";
  d.done(first[0]);
  auto second = d.launch();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(indices(second[0]), std::vector<int>{1});
  d.done(second[0]);
  d.ready({0, 2});
  auto third = d.launch();
  d.done(third.at(0));
  EXPECT_TRUE(d.idle());
}

TEST(Dispatcher, InOrderSkipsIterationsWithoutOps) {
  Schedule s = uniform_ops(1, 10, {}, /*period=*/3);
  Dispatcher d(s);
  d.ready({0, 0});
  d.done(d.launch().at(0));
  d.ready({3, 0});  // iterations 1 and 2 of the period have no ops
  auto m = d.launch();
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].ops[0].iteration, 3);
}

TEST(Dispatcher, CreditBoundsBytesInFlightAndPrefersPriority) {
  const Schedule s = uniform_ops(4, 10, {.kind = DispatchPolicy::Kind::kCredit, .credit = 25});
  Dispatcher d(s);
  for (int i = 3; i >= 0; --i) d.ready({0, i});
  auto sent = d.launch();
  ASSERT_EQ(sent.size(), 2u) << "25 bytes of credit hold two 10-byte ops";
  EXPECT_EQ(indices(sent[0]), std::vector<int>{0});
  EXPECT_EQ(indices(sent[1]), std::vector<int>{1});
  EXPECT_EQ(d.bytes_in_flight(), 20);
  d.done(sent[0]);
  auto next = d.launch();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(indices(next[0]), std::vector<int>{2});
}

TEST(Dispatcher, CreditAlwaysAllowsOneOpWhenIdle) {
  const Schedule s = uniform_ops(2, 100, {.kind = DispatchPolicy::Kind::kCredit, .credit = 10});
  Dispatcher d(s);
  d.ready({0, 1});
  d.ready({0, 0});
  auto sent = d.launch();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(indices(sent[0]), std::vector<int>{0});
}

TEST(Dispatcher, WindowsFuseTheBestReadyOps) {
  const Schedule s = uniform_ops(5, 10, {.kind = DispatchPolicy::Kind::kWindows, .windows = {30, 20}});
  Dispatcher d(s);
  d.ready({0, 4});
  d.ready({0, 3});
  auto first = d.launch();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(indices(first[0]), (std::vector<int>{3, 4})) << "a window never exceeds what is pending";
  EXPECT_EQ(first[0].bytes, 20);
  d.ready({0, 2});
  d.ready({0, 1});
  d.ready({0, 0});
  EXPECT_TRUE(d.launch().empty());
  d.done(first[0]);
  auto second = d.launch();
  EXPECT_EQ(indices(second.at(0)), (std::vector<int>{0, 1}));
  d.done(second[0]);
  auto third = d.launch();
  EXPECT_EQ(indices(third.at(0)), (std::vector<int>{2}));
}

// Note [Windows of bytes] in schedulers/dcredit.cc: a window is the bytes the plan
// put in it, so a small op that is ready sooner than planned shares its message.
TEST(Dispatcher, WindowsAreByteBudgets) {
  Schedule s = uniform_ops(6, 0, {.kind = DispatchPolicy::Kind::kWindows, .windows = {65536, 133056, 100}});
  const std::vector<Bytes> sizes = {704, 58112, 65536, 8704, 65536, 34304};
  for (size_t i = 0; i < sizes.size(); ++i) s.iterations[0][i].chunks = {{static_cast<int>(i), 0, sizes[i]}};
  Dispatcher d(s);
  for (int i = 5; i >= 0; --i) d.ready({0, i});
  std::vector<std::vector<int>> sent;
  for (auto m = d.launch(); !m.empty(); m = d.launch()) {
    sent.push_back(indices(m.at(0)));
    d.done(m.at(0));
  }
  EXPECT_EQ(sent, (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4}, {5}}))
      << "704 + 58112 bytes fit in 64 KiB; 65536 + 8704 + 65536 do not fit in 133056; "
         "a window holds at least one op, however large";
  EXPECT_TRUE(d.idle());
}

TEST(Dispatcher, PastTheWindowsEveryReadyOpOfTheIterationGoesAtOnce) {
  const Schedule s = uniform_ops(4, 10, {.kind = DispatchPolicy::Kind::kWindows, .windows = {10}});
  Dispatcher d(s);
  d.ready({0, 0});
  auto first = d.launch();
  ASSERT_EQ(first.size(), 1u);
  for (int i = 1; i < 4; ++i) d.ready({0, i});
  d.ready({1, 0});  // the next iteration's first op waits for that iteration's windows
  d.done(first[0]);
  auto rest = d.launch();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(indices(rest[0]), (std::vector<int>{1, 2, 3})) << "only ops of the earliest iteration";
  d.done(rest[0]);
  auto next = d.launch();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].ops, (std::vector<OpRef>{{1, 0}}));
}

TEST(Dispatcher, EarlierIterationsGoFirst) {
  const Schedule s = uniform_ops(2, 10, {.kind = DispatchPolicy::Kind::kCredit, .credit = 10});
  Dispatcher d(s);
  d.ready({0, 1});
  d.ready({1, 0});
  auto sent = d.launch();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].ops[0].iteration, 0);
}

}  // namespace
}  // namespace weft
