// Network: a fluid, max-min fair model of flows sharing links (docs/design.md §1.2).
//
// A flow (cost/cluster.h) first spends its `startup` seconds using no bandwidth, then
// transfers `volume` bytes across every link in its `links` at one rate. At every
// instant the rates of the transferring flows are the weighted max-min fair
// allocation over the link capacities (progressive filling: the link with the least
// capacity per unit of weight fixes the rate of its flows, each its weight times
// that, which are then removed, and so on); with every weight 1 (the default),
// plain max-min. Rates change only when a flow starts transferring or finishes,
// so the model is exact between those events: no time stepping, and times are
// computed in closed form.
//
// The network holds a clock but never advances it by itself: its owner (the
// simulator) asks for the time of the next network event, merges it with its own
// events, and advances the network to each event in time order.
//
// Cost: an event touches only the flows in flight and the links they cross, so the
// common case of one to three concurrent flows costs a few dozen operations. With
// thousands in flight (a large credit) on one link, an event costs O(log n) (Note
// [One link, one clock]); on several links, one pass over a dense array of them
// (Note [Transfers in one array]).
//
// Note [Flows alone]
// ------------------
// Max-min rates change only where flows share a link. A flow that begins or ends
// on links no other transferring flow crosses changes no one else's rate, so the
// network then sets its rate alone instead of refilling every flow: a parameter
// server's answers, which leave one after another on links of their own, cost a
// few operations each instead of a pass over every push in flight.
//
// Note [Transfers in one array]
// -----------------------------
// Off the clock (Note [One link, one clock]), every event changes the rate of
// each flow sharing a link with the one that began or ended, and banks the bytes
// each moved at its old rate. So the transferring flows' changing state lives in
// one contiguous array, in the order they began (swap-removed on finishing).
//
// Note [One link, one clock]
// ---------------------------
// Rule: while every transferring flow crosses one and the same link and the
// weights are integers, the network keeps one virtual clock V instead of each
// flow's bytes: V grows at the link's share per unit of weight (capacity over the
// weights' sum), and a flow that begins at V0 with b bytes, weight w and stretch s
// ends when V reaches its tag V0 + b·s/w. Flows are kept ordered by tag.
// Invariant: a flow's bytes left are (tag − V)·w/s; leaving the clock (a flow on
// another link, or a fractional weight) turns the tags back into bytes.
// Why: a start or an end then changes one sum and one ordered set, O(log n),
// instead of re-rating every flow in flight; the times differ from banking each
// flow's bytes only in their last bits (a relative 1e-15).
//
// Thread-safety: not thread-safe; one Network per simulation.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <set>
#include <span>
#include <vector>

#include "cost/cluster.h"
#include "units/units.h"

namespace weft {

// How many times slower than the network would carry it a flow advances, in its
// startup and in its transfer; both >= 1. One number stretches both.
struct Stretch {
  double startup = 1;
  double transfer = 1;
  Stretch(double both = 1) : startup(both), transfer(both) {}  // NOLINT: implicit by design
  Stretch(double startup_, double transfer_) : startup(startup_), transfer(transfer_) {}
  bool operator==(const Stretch&) const = default;
};

class Network {
 public:
  using FlowId = int;
  static constexpr Seconds kNever = std::numeric_limits<Seconds>::infinity();

  // REQUIRES: every capacity is finite and > 0.
  explicit Network(LinkSet links);

  // Starts `flow` at time `now`; its startup begins now. Returns an id, valid until
  // the flow is reported finished by advance(); the id may be reused after the
  // following call to advance(), so callers can start flows while handling a list
  // of finished ones. `stretch` as in set_stretch.
  // REQUIRES: time() <= now <= next_event(); every link id exists; startup and
  // volume >= 0; weight > 0; stretch >= 1. THROWS std::logic_error naming the values otherwise.
  FlowId start(Flow flow, Seconds now, Stretch stretch = 1);

  // From `now` on, flow `id` advances `stretch` times slower than the network
  // would carry it: what is left of its startup lasts stretch.startup times
  // longer, and it moves its fair share of bandwidth divided by stretch.transfer —
  // what it leaves unused is not given to other flows (its endpoint, not the
  // links, is what is slow). 1 is full speed.
  // REQUIRES: the flow is in flight; time() <= now <= next_event(); stretch >= 1.
  // THROWS std::logic_error otherwise.
  void set_stretch(FlowId id, Stretch stretch, Seconds now);

  // The time of the next event (a startup ending or a flow finishing); kNever when
  // no flow is in flight.
  Seconds next_event() const { return next_event_; }

  // Moves the clock to `t` and returns the flows that finished at `t`, in a
  // deterministic order. The reference is valid until the next call on this object.
  // REQUIRES: time() <= t <= next_event(). THROWS std::logic_error otherwise.
  const std::vector<FlowId>& advance(Seconds t);

  Seconds time() const { return now_; }
  int flows_in_flight() const { return in_flight_; }
  // Whether `id` is in flight: started, and not yet reported by advance().
  bool in_flight(FlowId id) const {
    return id >= 0 && id < static_cast<FlowId>(flows_.size()) && flows_[static_cast<size_t>(id)].phase != Phase::kFree;
  }

  // The current rate of a transferring flow, in bytes/s per link; 0 during startup.
  BytesPerSecond rate(FlowId id) const {
    const FlowState& f = flows_[static_cast<size_t>(id)];
    if (f.phase != Phase::kTransfer) return 0;
    return clock_link_ >= 0 ? clock_share_ * f.weight : transfers_[f.position].rate;
  }

  // Seconds, up to `at`, during which at least one flow was transferring on `link`.
  // REQUIRES: time() <= at <= next_event() (nothing changes in between).
  Seconds busy_time(int link, Seconds at) const;
  // The most flows ever transferring on `link` at once.
  int peak_flows(int link) const { return links_[static_cast<size_t>(link)].peak; }

  const LinkSet& links() const { return link_set_; }

 private:
  enum class Phase { kFree, kStartup, kTransfer };
  // Flows cross one link (all-reduce) or two (parameter server); keeping their ids
  // inline spares a pointer chase per flow in the rate computation.
  static constexpr int kInlineLinks = 4;

  // What a flow keeps for its whole life.
  struct FlowState {
    Phase phase = Phase::kFree;
    Seconds startup_end = 0;
    double volume = 0;        // bytes to cross once its startup ends
    Stretch stretch;          // set_stretch: progress is rate / stretch.transfer
    double weight = 1;
    size_t position = 0;      // index in transfers_, while kTransfer
    int n_links = 0;
    std::array<int, kInlineLinks> inline_links{};
    std::vector<int> more_links;  // all of them, when more than kInlineLinks

    std::span<const int> links() const {
      return n_links <= kInlineLinks ? std::span<const int>(inline_links.data(), static_cast<size_t>(n_links))
                                     : std::span<const int>(more_links);
    }
  };

  // What changes at every event, for a transferring flow (Note [Transfers in one array]).
  struct Transfer {
    double remaining = 0;     // bytes still to cross, as of `since`
    Seconds since = 0;
    BytesPerSecond rate = 0;
    double progress = 0;      // rate / stretch: bytes crossed per second
    Seconds finish = kNever;  // at the current rate
    double weight = 1;
    double stretch = 1;       // stretch.transfer
    double tag = 0;           // while the clock runs, instead of the above (Note [One link, one clock])
    FlowId id = 0;
    bool frozen = false;      // scratch for progressive filling
  };

  struct LinkState {
    int transferring = 0;  // flows in kTransfer crossing the link
    int peak = 0;
    Seconds busy_since = 0;
    Seconds busy_total = 0;
    // Scratch for progressive filling: remaining capacity, unfrozen flows and
    // their weight, and where this link's flows start in flows_by_link_.
    double capacity_left = 0;
    int unfrozen = 0;
    double unfrozen_weight = 0;
    int first = 0;
    int fill = 0;
    std::uint64_t mark = 0;
  };

  // Both return whether the flow shares one of its links with a transferring flow.
  bool begin_transfer(FlowId id);
  bool end_transfer(FlowId id);
  void move_alone(FlowId id);  // Note [Flows alone]
  void release(FlowId id);
  Seconds compute_rates();  // returns the earliest finish among the transfers
  Seconds next_startup_end() const;
  void update_next_event();
  // Note [One link, one clock].
  void start_clock(int link);
  void stop_clock();
  void tick(Seconds t);  // moves V to time t at the current share
  Seconds clock_finish(double tag) const;

  LinkSet link_set_;
  std::vector<LinkState> links_;
  std::vector<FlowState> flows_;
  std::vector<FlowId> free_ids_;
  std::vector<FlowId> starting_;      // in kStartup
  std::vector<Transfer> transfers_;   // in kTransfer, by position
  // Note [One link, one clock] needs to know: transferring flows crossing other
  // than one link; those whose weight is not an integer; the integral weights' sum, exact
  // (the same in any order of adding) while every partial sum stays below 2^53.
  static constexpr double kExactSum = 9007199254740992.0;  // 2^53
  int multi_link_transfers_ = 0;
  int inexact_weights_ = 0;
  double weight_sum_ = 0;
  bool weight_sum_exact_ = true;
  // Note [One link, one clock]: the link (-1: no clock), V at clock_since_, its
  // rate, and the transferring flows by (tag, id).
  int clock_link_ = -1;
  double clock_ = 0;
  Seconds clock_since_ = 0;
  double clock_share_ = 0;
  std::set<std::pair<double, FlowId>> by_tag_;
  std::vector<FlowId> finished_;      // returned by advance()
  std::vector<FlowId> begun_;         // scratch: flows that began transferring in advance()
  std::vector<int> touched_links_;    // scratch for progressive filling
  std::vector<size_t> flows_by_link_;  // scratch: positions of transferring flows grouped by link
  std::uint64_t mark_ = 0;
  Seconds now_ = 0;
  Seconds next_event_ = kNever;
  // At most the earliest finish among transfers_ (exact after each rate
  // computation, lowered whenever a finish is set between them): advance()
  // looks for finished transfers only from then on.
  Seconds first_finish_ = kNever;
  int in_flight_ = 0;
};

}  // namespace weft
