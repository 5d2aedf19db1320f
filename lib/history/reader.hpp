// Reading history files. Every byte of a file is validated before use --
// magic, format version, sizes against the file's length, counts against
// each other, every id against its name table, every op and flag, reserved
// bytes -- so that a corrupt or foreign file gives one error naming the file
// and what is wrong, never a crash or a silently wrong history.
// Thread-safety: stateless functions.
#pragma once

#include <string>
#include <vector>

#include "base/result.hpp"
#include "history/history.hpp"

namespace rdtx::history {

// Loads the history of one run from `paths`: files, and directories whose
// *.rdtxh files are all loaded (in name order). The files must belong to the
// same run and agree on names. Errors: ENOENT (no such path, or a directory
// with no history file), EIO (read error), EBADMSG (corrupt file), EINVAL
// (files that do not belong together), EFBIG (past History's limits); the
// message starts with the file's path. Completeness is left to
// History::check_complete() so a caller may report it its own way. The files
// are read and validated in parallel, each on its own thread, on `threads`
// threads (0: every core); the result and the error reported do not depend
// on it. ECANCELED when `stop` asked to give up (polled per piece read).
Result<History> load_history(const std::vector<std::string>& paths, unsigned threads = 0, const StopFn& stop = {});

// The file paths load_history would read for `paths`, in that order.
Result<std::vector<std::string>> expand_history_paths(const std::vector<std::string>& paths);

}  // namespace rdtx::history
