# Project-wide helpers: warnings, library and test registration.

function(di_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
      -Wnon-virtual-dtor -Woverloaded-virtual -Wimplicit-fallthrough>)
  if(DI_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>
      $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>)
  endif()
endfunction()

# di_add_library(name SOURCES ... DEPS ...)
function(di_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PUBLIC_DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${name} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_DEPS})
  di_set_warnings(${name})
endfunction()

# di_add_test(name SOURCES ... DEPS ... LABELS ... [TIMEOUT s] [SHARDS n])
# Registers a GoogleTest binary with ctest under the given labels (unit, integration, kernel, gpu).
# SHARDS n > 1 registers n ctest entries name_shard<i> that run disjoint subsets of its tests
# (GoogleTest sharding), so that ctest -j spreads a long binary over the cores.
function(di_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT;SHARDS" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${name} PRIVATE
    DI_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    DI_SHARED_DIR="${PROJECT_SOURCE_DIR}/../shared"
    DI_BINARY_DIR="${PROJECT_BINARY_DIR}")
  di_set_warnings(${name})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  if(ARG_SHARDS AND ARG_SHARDS GREATER 1)
    math(EXPR last "${ARG_SHARDS} - 1")
    foreach(i RANGE ${last})
      add_test(NAME ${name}_shard${i} COMMAND ${name})
      set_tests_properties(${name}_shard${i} PROPERTIES LABELS "${ARG_LABELS}"
        TIMEOUT ${ARG_TIMEOUT} SKIP_RETURN_CODE 77
        ENVIRONMENT "GTEST_TOTAL_SHARDS=${ARG_SHARDS};GTEST_SHARD_INDEX=${i}")
    endforeach()
  else()
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
      SKIP_RETURN_CODE 77)
  endif()
endfunction()
