// ropenorm::version(): the library's version string, from ropenorm/version.h at build time.
#include "ropenorm/version.h"

#define ROPENORM_STRINGIFY_(x) #x
#define ROPENORM_STRINGIFY(x) ROPENORM_STRINGIFY_(x)

namespace ropenorm {

namespace {
constexpr char kVersion[] = ROPENORM_STRINGIFY(ROPENORM_VERSION_MAJOR) "." ROPENORM_STRINGIFY(
    ROPENORM_VERSION_MINOR) "." ROPENORM_STRINGIFY(ROPENORM_VERSION_PATCH);
}  // namespace

const char* version() { return kVersion; }

}  // namespace ropenorm
