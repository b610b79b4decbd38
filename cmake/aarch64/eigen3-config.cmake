# cmake/aarch64-linux-gnu.cmake: Eigen is header-only, taken from the host's /usr/include/eigen3.
if(NOT TARGET Eigen3::Eigen)
  add_library(Eigen3::Eigen INTERFACE IMPORTED)
  set_target_properties(Eigen3::Eigen PROPERTIES INTERFACE_INCLUDE_DIRECTORIES /usr/include/eigen3)
endif()
