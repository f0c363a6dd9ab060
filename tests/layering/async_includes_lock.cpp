// The Asio port cannot include the blocking port: async/ sees core/ and
// below (CMakeLists.txt, lockon_layer(async SEES core)).
// expect: lock/lock_port.hpp: No such file or directory
#include "core/attempt.hpp"
#include "lock/lock_port.hpp"
