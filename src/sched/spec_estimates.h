// How draft acceptance is estimated (spec_policy.h): per n-gram match length, server-wide,
// starting at kAcceptPrior; each sequence's own record shrunk towards that with
// kSeqPriorWeight pseudo-positions. Decays: per draft verified (server-wide kGlobalDecay,
// sequence kSeqDecay); per step a sequence could have drafted but did not (kSeqRelax, back
// towards the server-wide estimate), and per step that offered drafts (kGlobalRelax,
// server-wide, back towards kAcceptPrior) — so estimates that stopped drafting are retried
// after a while (about 50 steps for a sequence, 700 server-wide). The planner reads the
// estimates (step_planner.h); the output stage records verified drafts (step_output.h).
#pragma once

namespace ubatch::sched {

inline constexpr double kAcceptPrior = 0.5, kAcceptPriorWeight = 2.0, kGlobalDecay = 0.995, kGlobalRelax = 0.999;
inline constexpr double kSeqPriorWeight = 4.0, kSeqDecay = 0.9, kSeqRelax = 0.98;

}  // namespace ubatch::sched
