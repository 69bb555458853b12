// The archive's translation unit: every operation of aboleth/device.cuh defined once, with
// external linkage (nvcc -rdc=true -c, then nvcc -lib).
#define ABOLETH_DEVICE_ARCHIVE_BUILD
#include <aboleth/device.cuh>
