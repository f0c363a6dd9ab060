// The client layer cannot include the lock layer (CMakeLists.txt, lockon_layer:
// its include root links only common/ and client/).
// expect: lock/subscriber.hpp: No such file or directory
#include "client/pool.hpp"
#include "lock/subscriber.hpp"
