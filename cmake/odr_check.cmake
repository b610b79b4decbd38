# The One Definition Rule check (ctest check_odr). Two different types of one name in namespace kvsim link
# silently, each CLI then runs with one of them (issue 25: two `kvsim::bench_point`s, a llama-bench row and a
# sweep point, and the linker kept one copy of std::vector<bench_point>'s members). The include-layer table cannot
# see it; GCC's link-time optimizer can: -Wodr at an LTO link compares every type definition of the linked units.
# Every layer's sources and apps/common (what both CLIs link; not the two mains) are compiled a second time as
# LTO bytecode at -O0 (no code generation: the cheap part of an LTO build), then linked into one relocatable
# object with -Werror=odr. Not part of `all`: the test builds it (a second compile of every unit at -O0 from a
# cold cache; after an edit, the changed units and the link). Included when KVSIM_ODR_CHECK is ON.
set(KVSIM_ODR_SOURCES ${KVSIM_APP_COMMON})
foreach(layer kvsim_core kvsim_util kvsim_kv kvsim_kernels kvsim_drive kvsim_time kvsim_sched kvsim_report kvsim_replay kvsim_timing kvsim_plan kvsim_bench)
  get_target_property(s ${layer} SOURCES)
  list(APPEND KVSIM_ODR_SOURCES ${s})
endforeach()
add_library(kvsim_odr_objects OBJECT EXCLUDE_FROM_ALL ${KVSIM_ODR_SOURCES})
# the layers' include directories and definitions (a usage requirement only: nothing of theirs is linked here)
target_link_libraries(kvsim_odr_objects PRIVATE kvsim_timing kvsim_plan kvsim_bench)
target_include_directories(kvsim_odr_objects PRIVATE apps ${CLI11_INCLUDE} ${FCCP_INCLUDE} ${CMAKE_BINARY_DIR}/generated)
if(KVSIM_HAVE_CUDA)   # apps/common's CUDA branches (the .cu units are nvcc's, outside this check)
  target_link_libraries(kvsim_odr_objects PRIVATE kvsim_cuda)
  target_compile_definitions(kvsim_odr_objects PRIVATE KVSIM_HAVE_CUDA=1)
endif()
# -w: the warnings are the normal build's job; this build reports ODR violations only
target_compile_options(kvsim_odr_objects PRIVATE ${KVSIM_CXX_OPT} -O0 -g0 -w -flto -fno-fat-lto-objects)
set(KVSIM_ODR_OUT ${CMAKE_CURRENT_BINARY_DIR}/kvsim_odr_check.o)
add_custom_command(OUTPUT ${KVSIM_ODR_OUT}
  COMMAND ${CMAKE_CXX_COMPILER} -O0 -flto -Wodr -Werror=odr -Werror=lto-type-mismatch -r -nostdlib
          $<TARGET_OBJECTS:kvsim_odr_objects> -o ${KVSIM_ODR_OUT}
  DEPENDS kvsim_odr_objects $<TARGET_OBJECTS:kvsim_odr_objects>
  COMMAND_EXPAND_LISTS
  COMMENT "ODR check: LTO link of every layer with -Werror=odr")
add_custom_target(kvsim_odr_check DEPENDS ${KVSIM_ODR_OUT})
add_test(NAME check_odr COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target kvsim_odr_check)
set_tests_properties(check_odr PROPERTIES TIMEOUT 1200)
