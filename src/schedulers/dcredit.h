// D-Credit's window sequence (docs/strategies.md §4.2, seed 001), computed offline from the
// profile and what one message costs (make_dcredit: collective_time() in the
// schedule's encoding, Notes [A collective's lateness in plans] and [Plans price
// the encoded message] in message_time.h: a window is priced by what its blocks
// carry, summed); exposed for make_dcredit
// (schedulers/dcredit.cc), for the planner and for tests.
//
// The sequence is read by DispatchPolicy::kWindows exactly as the Dispatcher
// implements it: one message at a time, and whenever the channel is free and some
// block is ready, message k of the iteration fuses the highest-priority ready
// blocks that fit in budgets[k] bytes (fewer if fewer are ready). The dispatcher
// never leaves the channel idle while a block is ready, so plan_windows() replays
// that same work-conserving loop, message by message, and chooses each window at
// the moment the dispatcher will launch it. See Notes [D-Credit windows] and
// [Windows of bytes] in dcredit.cc.
//
// Thread-safety: pure functions.
#pragma once

#include <vector>

#include "profile/profile.h"
#include "schedulers/blocks.h"
#include "schedulers/message_time.h"
#include "units/units.h"

namespace weft {

struct WindowPlan {
  std::vector<int> windows;     // blocks in each message (the seed's w); sums to the block count
  std::vector<Bytes> budgets;   // bytes in each message: DispatchPolicy::kWindows's windows
  int backward_windows = 0;     // windows[0, backward_windows) are launched before the
                                // last gradient arrives (phase 1), the rest after (phase 2)
  double horizon = 0;           // the phase-1 horizon it was planned with (see below)
  // The end of the next iteration's forward pass, in seconds from the start of the
  // backward pass, when every message costs message_time alone: the steady-state
  // iteration time this plan predicts (the simulator's, exactly).
  Seconds forward_end = 0;
};

// The whole window sequence of one iteration: phase 1 greedy, then phase 2
// optimal. In phase 1 each window ends just after the first gradient arrival that
// comes at least `horizon` one-block transfer times after the window starts;
// horizon 0 is the seed's rule (the next arrival), infinity sends every ready
// block. See Note [D-Credit windows] in dcredit.cc.
// REQUIRES `blocks` in priority order as partition_blocks(profile, ·) returns them
// (THROWS std::logic_error naming the first block out of order otherwise) and
// horizon >= 0.
WindowPlan plan_windows(const Profile& profile, const std::vector<Block>& blocks,
                        const MessageTime& message_time, double horizon = 0);

// The horizons dcredit chooses from: 0 (the seed's rule) first, then 1, 2, 4, 8, 16
// and infinity.
const std::vector<double>& phase1_horizons();

// The plan of phase1_horizons() with the earliest forward_end; ties keep the
// earlier horizon, so the seed's rule unless another is strictly faster.
WindowPlan fastest_window_plan(const Profile& profile, const std::vector<Block>& blocks,
                               const MessageTime& message_time);

// Phase 2: the windows, in order, that send `remaining` (all ready, the channel
// free) so that the next forward pass ends earliest, over every split of the
// blocks into consecutive windows. `fp[l]` is layer l's forward time. Exact, in
// O(G^2) calls of message_time for G layers in `remaining`; see Note [Optimal
// forward-phase windows] in dcredit.cc. On ties it prefers more, smaller windows
// (each layer's forward can start as soon as its own blocks are done).
// REQUIRES `remaining` in priority order (THROWS std::logic_error otherwise) and
// message_time subadditive (true of α + β·n with α >= 0, and of an encoded
// message: its collectives do not add up when merged).
std::vector<int> forward_phase_windows(const std::vector<Block>& remaining,
                                       const std::vector<Seconds>& fp,
                                       const MessageTime& message_time);

}  // namespace weft
