/* A simulated CUDA driver (libcuda.so.1) for machines without a GPU: the
 * one driver call libshelf asks to tell device memory from host memory
 * (cuPointerGetAttribute), over "device memory" this library hands out as
 * mappings the host cannot touch (PROT_NONE): a layer that reads or writes
 * such memory from the host faults, and the test that drove it fails.
 *
 *   drv = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)   # as a framework loads the driver
 *   dev = drv.simulated_cuda_device_alloc(1 << 20)     # "device memory"
 *
 * Only the attributes libshelf asks for are answered (memory type, managed);
 * any other call a CUDA runtime makes finds no symbol, so a runtime cannot
 * start on it, as on a machine with no usable driver. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

enum { kRangesMax = 64 };
enum { kAttributeMemoryType = 2, kAttributeIsManaged = 8 };
enum { kSuccess = 0, kErrorInvalidValue = 1, kErrorOutOfMemory = 2 };
enum { kMemoryTypeDevice = 2 };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  uintptr_t base;
  size_t size;
} ranges[kRangesMax];
static int range_count;

/* `size` bytes of "device memory"; null when out of ranges or memory. */
void* simulated_cuda_device_alloc(size_t size) {
  void* p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return NULL;
  pthread_mutex_lock(&mu);
  if (range_count == kRangesMax) {
    pthread_mutex_unlock(&mu);
    munmap(p, size);
    return NULL;
  }
  ranges[range_count].base = (uintptr_t)p;
  ranges[range_count].size = size;
  ++range_count;
  pthread_mutex_unlock(&mu);
  return p;
}

int cuPointerGetAttribute(void* data, int attribute, unsigned long long pointer) {
  int found = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < range_count && !found; ++i) {
    found = pointer >= ranges[i].base && pointer - ranges[i].base < ranges[i].size;
  }
  pthread_mutex_unlock(&mu);
  if (!found || data == NULL) return kErrorInvalidValue; /* memory the driver does not know */
  if (attribute == kAttributeMemoryType) {
    *(unsigned*)data = kMemoryTypeDevice;
    return kSuccess;
  }
  if (attribute == kAttributeIsManaged) {
    *(unsigned*)data = 0;
    return kSuccess;
  }
  return kErrorInvalidValue;
}
