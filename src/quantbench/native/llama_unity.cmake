# quantbench's compile-time grouping for the pinned llama.cpp (quantbench.native.llama_build).
#
# Included after llama.cpp's project() (CMAKE_PROJECT_INCLUDE); at the end of the top-level
# CMakeLists, when every target exists, it compiles two folders of small sources as one unit
# each, as llama.cpp itself does for its own models (src/CMakeLists.txt: UNITY_BUILD on the
# llama target, its core sources excluded):
#   - tools/mtmd/models/: 45 vision and audio graph builders, ~2 s each to compile on an AVX2-only
#     EPYC and almost all of it the same headers; 10 s as one unit. llama-server links mtmd, and
#     nothing here serves images or audio.
#   - common/parsers/: 16 chat-format parsers, ~6 s each; 18 s as one unit.
# Together 180 of the build's 1,130 CPU seconds down to 28. The code compiled is the same code,
# in one translation unit per folder (each folder compiled clean so, no warning).
# Change this file => bump RECIPE in llama_build.py, so that every build is configured anew.

include_guard(GLOBAL)

function(quantbench_unity_group target subdir)
    if(NOT TARGET ${target})
        return()
    endif()
    get_target_property(dir ${target} SOURCE_DIR)
    get_target_property(sources ${target} SOURCES)
    set(group "")
    foreach(source IN LISTS sources)
        if(IS_ABSOLUTE "${source}")
            set(path "${source}")
        else()
            set(path "${dir}/${source}")
        endif()
        get_filename_component(parent "${path}" DIRECTORY)
        if(parent STREQUAL "${dir}/${subdir}" AND path MATCHES "\\.cpp$")
            list(APPEND group "${path}")
        endif()
    endforeach()
    if(group)
        set_source_files_properties(${group} TARGET_DIRECTORY ${target}
            PROPERTIES UNITY_GROUP "quantbench_${subdir}")
        set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE GROUP)
        list(LENGTH group n)
        message(STATUS "quantbench: ${target}: ${n} sources of ${subdir}/ compiled as one unit")
    endif()
endfunction()

function(quantbench_unity_groups)
    quantbench_unity_group(mtmd models)
    quantbench_unity_group(llama-common parsers)
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL quantbench_unity_groups)
