# Cross build of kvsim for aarch64 Linux (Debian: g++-aarch64-linux-gnu; run the binaries with qemu-user), used by
# scripts/test-aarch64.sh to build and run the CPU kernel tests on NEON:
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DKVSIM_CUDA=OFF -DKVSIM_NATIVE=OFF
# The product's other dependencies are header-only or used so (fmt with FMT_HEADER_ONLY): their host headers in
# /usr/include are searched *after* the cross sysroot's (-idirafter), so glibc and libstdc++ come from
# /usr/aarch64-linux-gnu and only fmt/, nlohmann/, doctest/, CLI/, libfccp/ and Eigen are taken from the host.
# cmake/aarch64/*-config.cmake stand in for their packages (no aarch64 libfmt is needed).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
set(CMAKE_CXX_FLAGS_INIT "-idirafter /usr/include")

# Header-only stand-ins for find_package(fmt / nlohmann_json / Eigen3) and the find_path results of CMakeLists.txt
# (any existing directory: the headers themselves come through -idirafter /usr/include).
set(KVSIM_AARCH64_PKG ${CMAKE_CURRENT_LIST_DIR}/aarch64)
set(fmt_DIR ${KVSIM_AARCH64_PKG} CACHE PATH "" FORCE)
set(nlohmann_json_DIR ${KVSIM_AARCH64_PKG} CACHE PATH "" FORCE)
set(Eigen3_DIR ${KVSIM_AARCH64_PKG} CACHE PATH "" FORCE)
foreach(var CLI11_INCLUDE DOCTEST_INCLUDE FCCP_INCLUDE)
  set(${var} ${KVSIM_AARCH64_PKG} CACHE PATH "" FORCE)
endforeach()
set(NVTX3_INCLUDE NVTX3_INCLUDE-NOTFOUND CACHE PATH "" FORCE)
