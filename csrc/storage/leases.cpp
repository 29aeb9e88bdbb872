// leases.cpp: the leases of consumers: which lease an export, a pickle or a copy takes (the host
// one, Buffer::lease_host(), is inline in buffer.h). The leases themselves (begin_host_read(),
// begin_host_write(), begin_device_use()) are residency.cpp's.
#include "storage/buffer.h"

namespace hb {

Buffer Buffer::current_host_copy(const char *entry, CopyLayout layout) {
    begin_host_read();  // the copy reads the host copy
    return layout == CopyLayout::same_order ? copy_keeping_layout(entry) : copy(entry);
}

Buffer::DeviceView Buffer::lease_device(const char *entry, const DeviceChoice &on, Access access) {
    return begin_device_use(entry, on, lease_writes(access));
}

}  // namespace hb
