# cmake/aarch64-linux-gnu.cmake: fmt as header-only (FMT_HEADER_ONLY), its headers from the host's /usr/include.
if(NOT TARGET fmt::fmt)
  add_library(fmt::fmt INTERFACE IMPORTED)
  set_target_properties(fmt::fmt PROPERTIES INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY=1)
endif()
