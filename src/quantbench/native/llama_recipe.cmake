# quantbench's compile recipe for the pinned llama.cpp (quantbench.native.llama_build): what
# changes the build's time, never the code a measurement runs.
#
# Included after llama.cpp's project() (CMAKE_PROJECT_INCLUDE); at the end of the top-level
# CMakeLists, when every target exists:
#
# 1. It compiles two folders of small sources as one unit each, as llama.cpp itself does for its
# own models (src/CMakeLists.txt: UNITY_BUILD on the llama target, its core sources excluded):
#   - tools/mtmd/models/: 45 vision and audio graph builders, ~2 s each to compile on an AVX2-only
#     EPYC and almost all of it the same headers; 10 s as one unit. llama-server links mtmd, and
#     nothing here serves images or audio.
#   - common/parsers/: 16 chat-format parsers, ~6 s each; 18 s as one unit.
# Together 180 of the build's 1,130 CPU seconds down to 28. The code compiled is the same code,
# in one translation unit per folder (each folder compiled clean so, no warning).
#
# 2. It compiles at -O1 (not -O3) the code llama-server runs once at its start or never for a
# text model, none of it on a request's path: the multimodal library (mtmd: image and audio
# encoders; llama-server links it, nothing here serves images or audio), argument parsing
# (arg.cpp), presets (preset.cpp), model downloads (download.cpp: every model here is a local
# file) and MCP tools (server-mcp.cpp). 141 of the build's CPU seconds at -O3 on a 2-core Xeon,
# 80 at -O1. A source named here that the target lacks stops the configure: a new llama.cpp
# release must be read again, not silently built otherwise.
#
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

# -O1 for the named sources of a target (file names, as its SOURCES list them); a name the
# target lacks is an error.
function(quantbench_cold_sources target)
    if(NOT TARGET ${target})
        return()
    endif()
    get_target_property(dir ${target} SOURCE_DIR)
    get_target_property(sources ${target} SOURCES)
    set(cold "")
    foreach(name IN LISTS ARGN)
        list(FIND sources "${name}" at)
        if(at EQUAL -1)
            message(FATAL_ERROR "quantbench: target ${target} has no source ${name}; the list "
                "of cold code in llama_recipe.cmake does not fit this llama.cpp release")
        endif()
        list(APPEND cold "${dir}/${name}")
    endforeach()
    set_source_files_properties(${cold} TARGET_DIRECTORY ${target}
        PROPERTIES COMPILE_OPTIONS "-O1")
    message(STATUS "quantbench: ${target}: ${ARGN} compiled at -O1 (cold code)")
endfunction()

function(quantbench_recipe)
    quantbench_unity_group(mtmd models)
    quantbench_unity_group(llama-common parsers)
    if(TARGET mtmd)  # the whole multimodal library, its unity unit included
        set_property(TARGET mtmd APPEND PROPERTY COMPILE_OPTIONS "-O1")
        message(STATUS "quantbench: mtmd compiled at -O1 (cold code)")
    endif()
    quantbench_cold_sources(llama-common arg.cpp preset.cpp download.cpp)
    quantbench_cold_sources(server-context server-mcp.cpp)
endfunction()

cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL quantbench_recipe)
