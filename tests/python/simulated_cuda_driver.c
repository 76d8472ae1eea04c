/* A simulated CUDA driver (libcuda.so.1) for machines without a GPU: the
 * driver calls libshelf makes, the one that tells device memory from host
 * memory (cuPointerGetAttribute) and the two synchronous copies
 * (cuMemcpyDtoH_v2, cuMemcpyHtoD_v2), over "device memory" this library
 * hands out as mappings the host cannot touch (PROT_NONE): a layer that
 * reads or writes such memory from the host faults, and the test that drove
 * it fails. The copies go through a second, private mapping of the same
 * pages, as a GPU's copy engine reaches memory the host cannot.
 *
 *   drv = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)   # as a framework loads the driver
 *   dev = drv.simulated_cuda_device_alloc(1 << 20)     # "device memory"
 *   drv.cuMemcpyHtoD_v2(dev, host, n)                  # fill it
 *
 * Only the attributes libshelf asks for are answered (memory type, managed);
 * any other call a CUDA runtime makes finds no symbol, so a runtime cannot
 * start on it, as on a machine with no usable driver. Built with
 * SIMULATED_CUDA_NO_COPIES, it has no copies: a driver libshelf cannot move
 * device memory with. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum { kRangesMax = 64 };
enum { kAttributeMemoryType = 2, kAttributeIsManaged = 8 };
enum { kSuccess = 0, kErrorInvalidValue = 1, kErrorOutOfMemory = 2 };
enum { kMemoryTypeDevice = 2 };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  uintptr_t base;   /* the "device" view: PROT_NONE */
  size_t size;
  char* shadow;     /* the same pages, readable and writable: the copies' view */
} ranges[kRangesMax];
static int range_count;

/* `size` bytes of "device memory"; null when out of ranges or memory. */
void* simulated_cuda_device_alloc(size_t size) {
  int fd = memfd_create("simulated-cuda-device", MFD_CLOEXEC);
  if (fd < 0) return NULL;
  if (ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    return NULL;
  }
  void* p = mmap(NULL, size, PROT_NONE, MAP_SHARED, fd, 0);
  void* shadow = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED || shadow == MAP_FAILED) {
    if (p != MAP_FAILED) munmap(p, size);
    if (shadow != MAP_FAILED) munmap(shadow, size);
    return NULL;
  }
  pthread_mutex_lock(&mu);
  if (range_count == kRangesMax) {
    pthread_mutex_unlock(&mu);
    munmap(p, size);
    munmap(shadow, size);
    return NULL;
  }
  ranges[range_count].base = (uintptr_t)p;
  ranges[range_count].size = size;
  ranges[range_count].shadow = shadow;
  ++range_count;
  pthread_mutex_unlock(&mu);
  return p;
}

/* The copies' view of [pointer, pointer + n) of device memory; null when it
 * is not all inside one allocation. */
static char* shadow_of(unsigned long long pointer, size_t n) {
  char* out = NULL;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < range_count && out == NULL; ++i) {
    if (pointer >= ranges[i].base && pointer - ranges[i].base <= ranges[i].size &&
        n <= ranges[i].size - (pointer - ranges[i].base)) {
      out = ranges[i].shadow + (pointer - ranges[i].base);
    }
  }
  pthread_mutex_unlock(&mu);
  return out;
}

#ifndef SIMULATED_CUDA_NO_COPIES
int cuMemcpyDtoH_v2(void* dst_host, unsigned long long src_device, size_t n) {
  char* src = shadow_of(src_device, n);
  if (src == NULL || dst_host == NULL) return kErrorInvalidValue;
  memcpy(dst_host, src, n);
  return kSuccess;
}

int cuMemcpyHtoD_v2(unsigned long long dst_device, const void* src_host, size_t n) {
  char* dst = shadow_of(dst_device, n);
  if (dst == NULL || src_host == NULL) return kErrorInvalidValue;
  memcpy(dst, src_host, n);
  return kSuccess;
}
#endif

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
