# The one library consumers link: rangekv::rangekv (target rangekv_lib in the tree, exported as
# rangekv::rangekv). Its PUBLIC include directory is include/ only (the public headers,
# include/rangekv/*.h); everything under src/ stays private to the internal targets.
#
# Packaging: the internal static libraries (rangekv_base ... rangekv_engine) are installed and
# exported with it (rangekv_service_proto, the store service protocol, and rangekv_store, one
# open store, included; as rangekv::rangekv_<part>, an implementation detail: link
# rangekv::rangekv), with rangekvConfig.cmake + rangekvConfigVersion.cmake so
#   find_package(rangekv CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE rangekv::rangekv)
# works from an installed prefix. The config finds the internal dependencies (Threads,
# libxxhash, liburing and the CUDA runtime when they were built in) with find_dependency.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

add_library(rangekv_lib INTERFACE)
set_target_properties(rangekv_lib PROPERTIES EXPORT_NAME rangekv)
target_include_directories(rangekv_lib INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(rangekv_lib INTERFACE rangekv_engine)
add_library(rangekv::rangekv ALIAS rangekv_lib)

set(RANGEKV_EXPORTED_TARGETS rangekv_lib rangekv_warnings rangekv_base rangekv_env rangekv_io
    rangekv_pack rangekv_directory rangekv_kernels rangekv_device rangekv_persist
    rangekv_service_proto rangekv_remote rangekv_store rangekv_engine)
install(TARGETS ${RANGEKV_EXPORTED_TARGETS} EXPORT rangekvTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/rangekv
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(TARGETS rangekv RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})  # the CLI
install(EXPORT rangekvTargets NAMESPACE rangekv::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/rangekv)

set(RANGEKV_CONFIG_URING OFF)
if(URING_FOUND)
  set(RANGEKV_CONFIG_URING ON)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/rangekvConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/rangekvConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/rangekv)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/rangekvConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/rangekvConfig.cmake
        ${CMAKE_CURRENT_BINARY_DIR}/rangekvConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/rangekv)

# install_consumer_test: installs this build into a temporary prefix, then configures, builds
# and runs testing/consumer (find_package(rangekv) + a store/restore round trip on the host
# device). Needs the whole tree built. Not under sanitizers (the consumer would need their
# runtime flags).
if(RANGEKV_BUILD_TESTS AND NOT RANGEKV_SANITIZE)
  add_test(NAME install_consumer_test
           COMMAND ${PROJECT_SOURCE_DIR}/testing/consumer/run_test.sh ${CMAKE_COMMAND}
                   ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR}/testing/consumer
                   ${CMAKE_BINARY_DIR}/install_consumer_test ${CMAKE_CXX_COMPILER}
                   ${CMAKE_BUILD_TYPE})
  set_tests_properties(install_consumer_test PROPERTIES TIMEOUT 600)
endif()
