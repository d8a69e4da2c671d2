#include "sched/runner.h"

namespace ubatch::sched {

void sample_rows(std::vector<RowSample>& rows, const std::function<void(size_t, RowSample&)>& sample) {
  bool rejected = false;  // a draft of the current sequence was rejected: skip to its last row
  for (size_t k = 0; k < rows.size(); ++k) {
    RowSample& row = rows[k];
    if (rejected) {
      row.token = -1;
      row.sampled = false;
      if (row.draft < 0) rejected = false;  // the sequence's last row: the next row starts another
      continue;
    }
    sample(k, row);
    row.sampled = true;
    if (row.draft >= 0 && row.token != row.draft) rejected = true;  // a grammar's -1 too
  }
}

}  // namespace ubatch::sched
