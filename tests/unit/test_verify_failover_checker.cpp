// unit/test_verify_failover_checker.cpp — the checker's Sentinel rules
// (tests/verify/checker_failover.hpp) against histories written by hand:
// an overlap across a promotion is allowed only while the old master was
// within its window, the stale holder (whichever of the two ran on the old
// master) must see its loss (or, with a fence, be refused by the resource),
// a grant on the old master after the window is
// an old_master_grant, and a clean failover gives nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "checker.hpp"
#include "verify_checker_support.hpp"

namespace lockon::verify {
namespace {

constexpr int kOld = 7001;
constexpr int kNew = 7002;
constexpr std::int64_t kPromotedAt = 5000;  // ms; the window is 1000 ms

// One acquired section of `worker` on key k, on the master on port `server`:
// acquired at `at_ms`, released at `until_ms`.
CsRecord section_on_server(const std::string& worker, std::uint64_t fence, std::int64_t at_ms, std::int64_t until_ms,
                           int server) {
  static long long seq = 0;
  return CsRecord{.worker = worker, .thread = 0, .seq = ++seq, .mechanism = "lock", .key = "k", .fence = fence,
                  .start_ns = kT0 + at_ms * kMs - kMs, .acquired_ns = kT0 + at_ms * kMs,
                  .release_ns = kT0 + until_ms * kMs, .end_ns = kT0 + until_ms * kMs + kMs / 10,
                  .deadline_ms = 3000, .write = 'A', .server = server};
}

FaultRecord promotion(int old_port, int new_port, std::int64_t at_ms) {
  return FaultRecord{.type = "promotion", .target = "master:" + std::to_string(new_port),
                     .start_ns = kT0 + at_ms * kMs, .end_ns = kT0 + (at_ms + 1000) * kMs,
                     .detail = "old=" + std::to_string(old_port) + ":new=" + std::to_string(new_port) +
                               ":window_ms=1000"};
}

// Serial sections on key k every 10 ms from 0 to 10 s, on the old master
// until the promotion at 5 s, then on the new one; fences increasing.
History failover_history() {
  History h;
  h.meta["ttl_ms"] = "2000";
  std::uint64_t fence = 0;
  for (std::int64_t at = 0; at < 10000; at += 10) {
    const char* worker = fence % 2 == 0 ? "w0.0" : "w1.0";
    h.sections.push_back(section_on_server(worker, ++fence, at, at + 5, at < kPromotedAt ? kOld : kNew));
  }
  h.faults.push_back(FaultRecord{.type = "sentinel_failover", .target = "sentinel1", .start_ns = kT0 + 4000 * kMs,
                                 .end_ns = kT0 + kPromotedAt * kMs, .detail = "reply=OK"});
  h.faults.push_back(promotion(kOld, kNew, kPromotedAt));
  return h;
}

// Without the serial sections acquired in [from_ms, to_ms): room for the
// sections a test plants.
History without(History h, std::int64_t from_ms, std::int64_t to_ms) {
  std::erase_if(h.sections, [&](const CsRecord& r) {
    return r.acquired_ns >= kT0 + from_ms * kMs && r.acquired_ns < kT0 + to_ms * kMs;
  });
  return h;
}

TEST(VerifyFailoverChecker, ACleanFailoverHasNoViolationAndItsFigures) {
  const Findings findings = check(failover_history());
  EXPECT_EQ(kinds(findings), std::vector<std::string>{});
  ASSERT_EQ(findings.failovers.size(), 1u);
  const FailoverFigure& figure = findings.failovers.front();
  EXPECT_EQ(figure.old_port, kOld);
  EXPECT_EQ(figure.new_port, kNew);
  EXPECT_EQ(figure.cause, "sentinel_failover sentinel1");
  EXPECT_EQ(figure.on_old_after, 0);
  EXPECT_EQ(figure.last_on_old_ns, -1);
  EXPECT_EQ(figure.first_on_new_ns, 0);
}

TEST(VerifyFailoverChecker, AHolderOnTheOldMasterOverlappedAfterThePromotionMustSeeItsLoss) {
  // (saw the loss, the resource refused it): either is enough, neither is a silent loss.
  for (const auto& [saw_loss, refused] : {std::pair{true, false}, std::pair{false, true}, std::pair{false, false}}) {
    History h = without(failover_history(), kPromotedAt - 200, kPromotedAt);
    // Granted by the old master 100 ms before the promotion, held 600 ms;
    // the new master (its key not replicated) grants k at once.
    CsRecord stale = section_on_server("w5.0", 490, kPromotedAt - 100, kPromotedAt + 500, kOld);
    stale.lost = saw_loss;
    stale.write = refused ? 'R' : 'A';
    h.sections.push_back(stale);
    const Findings findings = check(h);
    EXPECT_GT(findings.allowed_overlaps, 0) << "saw_loss " << saw_loss;
    EXPECT_EQ(findings.allowed_by_fault.count("promotion"), 1u);
    if (saw_loss || refused) {
      EXPECT_EQ(kinds(findings), std::vector<std::string>{}) << saw_loss << refused;
    } else {
      ASSERT_EQ(findings.count(), (std::map<std::string, int>{{"silent_loss", 1}}));
      EXPECT_NE(findings.violations.front().what.find("w5.0"), std::string::npos);
    }
  }
}

TEST(VerifyFailoverChecker, TheStaleHolderIsTheOneOnTheOldMasterEvenWhenItCameSecond) {
  for (const bool saw_loss : {true, false}) {
    History h = without(failover_history(), kPromotedAt + 100, kPromotedAt + 950);
    // A new-master holder from +100 ms; a client still following the old
    // master is granted k there at +500 ms, within the window (its fence
    // above every released one: no fence-order finding, only the overlap).
    h.sections.push_back(section_on_server("w5.0", 511, kPromotedAt + 100, kPromotedAt + 900, kNew));
    CsRecord stale = section_on_server("w6.0", 512, kPromotedAt + 500, kPromotedAt + 600, kOld);
    stale.lost = saw_loss;
    stale.write = 'A';  // the resource did not refuse it (an unfenced section: never)
    h.sections.push_back(stale);
    const Findings findings = check(h);
    if (saw_loss) {
      EXPECT_EQ(kinds(findings), std::vector<std::string>{});
    } else {
      ASSERT_EQ(findings.count(), (std::map<std::string, int>{{"silent_loss", 1}}));
      EXPECT_NE(findings.violations.front().what.find("the later one is the stale holder"), std::string::npos);
      EXPECT_NE(findings.violations.front().what.find("w6.0"), std::string::npos);
    }
  }
}

TEST(VerifyFailoverChecker, AGrantOnTheOldMasterAfterTheWindowIsAViolationAndItsOverlapIsNotExcused) {
  History h = failover_history();
  CsRecord late = section_on_server("w6.0", 3001, kPromotedAt + 1500, kPromotedAt + 1600, kOld);
  late.lost = true;
  h.sections.push_back(late);
  const Findings findings = check(h);
  EXPECT_EQ(findings.count("old_master_grant").at("old_master_grant"), 1);
  EXPECT_GT(findings.count("overlap").at("overlap"), 0);
  EXPECT_EQ(findings.failovers.front().on_old_after_window, 1);
  EXPECT_EQ(findings.failovers.front().last_on_old_ns, 1500 * kMs);
  for (const auto& v : findings.violations) {
    if (v.kind == "old_master_grant") {
      EXPECT_EQ(v.cause_type, "promotion");
    }
  }
}

TEST(VerifyFailoverChecker, AGrantOnTheOldMasterPastTheWindowIsLateWhatTheSentinelsName) {
  // The target counts from the promotion: a sentinel still naming
  // the old master 2 s later excuses no grant there after the window.
  History h = failover_history();
  h.faults.push_back(FaultRecord{.type = "unnamed", .target = "master:" + std::to_string(kOld),
                                 .start_ns = kT0 + (kPromotedAt + 2000) * kMs,
                                 .end_ns = kT0 + (kPromotedAt + 2000) * kMs, .detail = "-"});
  CsRecord late = section_on_server("w6.0", 3001, kPromotedAt + 1500, kPromotedAt + 1600, kOld);
  late.lost = true;
  h.sections.push_back(late);
  EXPECT_EQ(check(h).count("old_master_grant").at("old_master_grant"), 1);
}

TEST(VerifyFailoverChecker, ASectionWhoseClientSwitchedDuringItsAcquisitionMayBeOnEitherMaster) {
  // w6.0 waited on the stopped old master; it resumes at +200 ms and grants
  // the waiting command, while the client, told of the failover, asks the
  // new master its port: recorded on kNew, kOld before. It overlaps w5.0
  // on kNew: a failover overlap (w6.0 stale, it saw its loss), not two
  // holders on one master.
  History h = without(failover_history(), kPromotedAt, kPromotedAt + 900);
  h.sections.push_back(section_on_server("w5.0", 511, kPromotedAt + 10, kPromotedAt + 900, kNew));
  CsRecord switched = section_on_server("w6.0", 512, kPromotedAt + 200, kPromotedAt + 210, kNew);
  switched.server_before = kOld;
  switched.release_error = "LockNotOwned";
  h.sections.push_back(switched);
  const Findings findings = check(h);
  EXPECT_EQ(kinds(findings), std::vector<std::string>{});
  EXPECT_EQ(findings.allowed_by_fault.at("promotion"), 1);
  // The master did not answer before the acquisition (-1): either too.
  h.sections.back().server_before = -1;
  EXPECT_EQ(kinds(check(h)), std::vector<std::string>{});
  // Without the port before (not recorded), it is two holders on kNew.
  h.sections.back().server_before = 0;
  EXPECT_GT(check(h).count("overlap").at("overlap"), 0);
}

TEST(VerifyFailoverChecker, TheOldMasterPromotedAgainMayGrantAgain) {
  History h = failover_history();
  h.faults.push_back(promotion(kNew, kOld, 8000));
  // Sections from 8 s on (serial, still on kNew in the base history) move
  // to kOld: legitimate there again. One on kNew after 9 s would not be.
  for (auto& r : h.sections)
    if (r.acquired_ns >= kT0 + 8000 * kMs) r.server = kOld;
  EXPECT_EQ(kinds(check(h)), std::vector<std::string>{});
  h.sections.back().server = kNew;
  EXPECT_EQ(check(h).count("old_master_grant").at("old_master_grant"), 1);
}

TEST(VerifyFailoverChecker, TheOldMasterPromotedAgainMayGrantBeforeThePollSeesIt) {
  // The ROLE poll saw kOld master again at 8 s, up to kPromotionSeenLate
  // after it began granting (verify seed 2: 141 grants 0-120 ms before).
  History h = failover_history();
  h.faults.push_back(promotion(kNew, kOld, 8000));
  for (auto& r : h.sections)
    if (r.acquired_ns >= kT0 + 7850 * kMs) r.server = kOld;
  EXPECT_EQ(kinds(check(h)), std::vector<std::string>{});
  // 400 ms before it is still late.
  for (auto& r : h.sections)
    if (r.acquired_ns >= kT0 + 7600 * kMs) r.server = kOld;
  EXPECT_GT(check(h).count("old_master_grant").at("old_master_grant"), 0);
}

TEST(VerifyFailoverChecker, AHolderRenewedOnTheNewMasterOverlapsAStaleGrantOfTheOldOne) {
  // w5.0 is granted by the old master before the promotion and holds 2.5 s:
  // its client switched and renews the (replicated) key on the new master,
  // the old master's copy lapsed and it grants w6.0: w6.0 is the stale one.
  for (const std::int64_t at : {kPromotedAt + 500, kPromotedAt + 1500}) {
    for (const bool saw_loss : {true, false}) {
      History h = without(failover_history(), kPromotedAt - 1000, kPromotedAt + 2000);
      h.sections.push_back(section_on_server("w5.0", 450, kPromotedAt - 1000, kPromotedAt + 1900, kOld));
      CsRecord stale = section_on_server("w6.0", 451, at, at + 100, kOld);
      stale.lost = saw_loss;
      h.sections.push_back(stale);
      const Findings findings = check(h);
      if (at > kPromotedAt + 1000) {
        // Past the window: the late grant and the overlap it made.
        EXPECT_EQ(findings.count("old_master_grant").at("old_master_grant"), 1);
        EXPECT_EQ(findings.count("overlap").at("overlap"), 1);
      } else if (saw_loss) {
        EXPECT_EQ(kinds(findings), std::vector<std::string>{});
        EXPECT_EQ(findings.allowed_by_fault.at("promotion"), 1);
      } else {
        ASSERT_EQ(findings.count(), (std::map<std::string, int>{{"silent_loss", 1}}));
        EXPECT_NE(findings.violations.front().what.find("the later one is the stale holder"), std::string::npos);
      }
    }
  }
}

TEST(VerifyFailoverChecker, AStallOfTheOldMasterDoesNotMakeAHolderOnTheNewOneStale) {
  // kOld stopped from -2.5 s to +600 ms; w5.0 holds k on kNew from +200 ms;
  // w6.0's command waited on kOld and is granted there as it resumes. The
  // stale one is w6.0 (it saw its loss), not w5.0 (a stall of kOld cannot
  // lapse a lease on kNew).
  History h = without(failover_history(), kPromotedAt - 2500, kPromotedAt + 1500);
  h.faults.push_back(FaultRecord{.type = "master_stall_long", .target = "master:" + std::to_string(kOld),
                                 .start_ns = kT0 + (kPromotedAt - 2500) * kMs,
                                 .end_ns = kT0 + (kPromotedAt + 600) * kMs, .detail = "ms=3100"});
  std::sort(h.faults.begin(), h.faults.end(),
            [](const FaultRecord& x, const FaultRecord& y) { return x.start_ns < y.start_ns; });
  CsRecord fresh = section_on_server("w5.0", 600, kPromotedAt + 200, kPromotedAt + 1400, kNew);
  fresh.write = 'R';  // the resource saw w6.0's higher fence first
  h.sections.push_back(fresh);
  CsRecord stale = section_on_server("w6.0", 601, kPromotedAt + 610, kPromotedAt + 615, kNew);
  stale.server_before = -1;
  stale.release_error = "LockNotOwned";
  h.sections.push_back(stale);
  const Findings findings = check(h);
  EXPECT_EQ(kinds(findings), std::vector<std::string>{});
  EXPECT_EQ(findings.allowed_by_fault.at("promotion"), 1);
}

TEST(VerifyFailoverChecker, TwoHoldersOnOneMasterAreNeverExcusedByAFailover) {
  History h = failover_history();
  h.sections.push_back(section_on_server("w5.0", 3000, kPromotedAt + 100, kPromotedAt + 900, kNew));
  const Findings findings = check(h);
  EXPECT_GT(findings.count("overlap").at("overlap"), 0);
  EXPECT_EQ(findings.allowed_overlaps, 0);
}

TEST(VerifyFailoverChecker, AStaleHoldersRepeatedFenceInTheWindowIsNoFenceOrderViolationIfRefused) {
  for (const char write : {'R', 'A'}) {
    History h = failover_history();
    // The old master's counter repeats a fence the new master issued.
    CsRecord stale = section_on_server("w6.0", 510, kPromotedAt + 300, kPromotedAt + 303, kOld);
    stale.write = write;
    stale.lost = true;
    h.sections.push_back(stale);
    const auto fence_order = check(h).count("fence_order");
    if (write == 'R') {
      EXPECT_TRUE(fence_order.empty());
    } else {
      EXPECT_EQ(fence_order.at("fence_order"), 1);
    }
  }
}

TEST(VerifyFailoverChecker, ASectionLineKeepsItsServerAndOldLinesStillParse) {
  CsRecord r = section_on_server("w1.2", 7, 10, 20, kNew);
  r.server_before = kOld;
  std::string line = format(r);
  line.pop_back();  // the log's '\n'
  const auto parsed = parse_cs(line);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->server, kNew);
  EXPECT_EQ(parsed->server_before, kOld);
  std::string old = line;
  old.erase(old.rfind(' '));
  old.erase(old.rfind(' '));  // the 16-field line of older histories
  const auto old_parsed = parse_cs(old);
  ASSERT_TRUE(old_parsed.has_value());
  EXPECT_EQ(old_parsed->server, 0);
  EXPECT_EQ(old_parsed->fence, 7u);
}

}  // namespace
}  // namespace lockon::verify
