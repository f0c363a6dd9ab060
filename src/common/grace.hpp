// The grace of a step that follows a caller's deadline, on every front.
#pragma once

#include <chrono>

namespace lockon::detail {

/// How long a step that runs at or after a caller's deadline may wait for
/// the server before it is left to the background clean-up: giving up a
/// queue place, deleting a holder record, giving back the keys a MultiLock
/// took before it failed. A healthy server answers in well under 1 ms; a
/// frozen master or a Cluster answering CLUSTERDOWN would otherwise keep
/// the caller past its deadline for a socket timeout or a routing bound.
inline constexpr std::chrono::milliseconds kCancelGrace{25};

}  // namespace lockon::detail
